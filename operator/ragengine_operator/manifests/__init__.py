"""Pure builders: spec in, manifest dicts out. No I/O, no clock, no globals."""
