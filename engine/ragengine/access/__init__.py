"""Access control: who may call which route on which index (rules, routes, decide, source, enforce)."""
