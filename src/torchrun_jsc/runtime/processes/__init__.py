"""This agent's processes: its workers, registered and watched (``workers``), the orphan
watcher that ends them with the agent (``orphans``) and the agent's own immediate end
(``end``). Imports nothing of the runtime."""
