"""Examples of reconcilers written on the public :mod:`runtime` facade; each is tested."""
