"""The control plane's operations behind the HTTP routes and the CLI: bundles (export, import),
doctor checks, integrations, place listings. A front end, beside ``server`` and ``cli``: it may use
the composition root (``services``), nothing below imports it. Import the submodules you need."""
