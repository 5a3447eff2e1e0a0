"""Private machinery behind the public modules; no stability promise."""
