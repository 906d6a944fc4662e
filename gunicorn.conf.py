"""gunicorn's settings for the portal: gunicorn reads ``./gunicorn.conf.py`` from its working
directory (the deploy units and images start it in the repo's root).

gunicorn itself believes ``X-Forwarded-Proto``, ``X-Forwarded-Ssl`` and
``X-Forwarded-Protocol`` from the addresses in ``forwarded_allow_ips`` (by default 127.0.0.1)
and sets the request's scheme from them before Django sees it: any local process, or anything
a local proxy passes through untouched, could make a plain-HTTP request look like HTTPS. The
portal trusts forwarded headers only from ``GPUPOOL_TRUSTED_PROXIES`` (portal/proxies.py), and
gunicorn now trusts exactly the same peers.
"""

from __future__ import annotations

import os

# A comma-separated string, as gunicorn's own option takes it; empty: no peer is trusted.
forwarded_allow_ips = ",".join(
    network.strip()
    for network in os.environ.get("GPUPOOL_TRUSTED_PROXIES", "").split(",")
    if network.strip()
)
