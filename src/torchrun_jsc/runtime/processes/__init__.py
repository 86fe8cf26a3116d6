"""This agent's processes: its workers, registered and watched (``workers``: a registry
object), the orphan watcher that ends them with the agent (``orphans``: a watcher object; the
file is also the watcher's program), the agent's own immediate end (``end``) and its lines on
stderr (``output``). No module-level state: the process's runtime holds the objects. Imports
nothing of the runtime."""
