"""``python -m gpupool_cli`` runs the same command as the ``gpupool`` script."""

from gpupool_cli.main import main

main()
