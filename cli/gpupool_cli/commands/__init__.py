"""The ``gpupool`` commands, one module per area. Each one is a thin reading of one REST
operation: the portal decides everything (validation, tenancy, quotas), the CLI only shapes
requests and answers. Importing a module registers its commands on
:data:`gpupool_cli.app.cli`; :mod:`gpupool_cli.main` imports them all."""
