"""This agent's processes: its workers, registered and watched (``workers``), the orphan
watcher that ends them with the agent (``orphans``), the agent's own immediate end
(``end``) and its lines on stderr (``output``). Imports nothing of the runtime."""
