"""The Kubernetes REST API over the store: routing, verbs, validation and watch streams.

This package knows nothing about sockets: :meth:`Api.handle` takes a :class:`Request` and
returns a :class:`Response` (a body, or a streaming callback for watches and followed logs).
The HTTP server in :mod:`kubesim.server` only moves bytes.

Request pipeline, in the apiserver's order: authenticate (401) -> route (404) -> authorize
(403) -> injected faults -> decode -> prune unknown fields (Strict: 400) -> defaults -> schema
and name validation (422) -> Volcano admission webhooks (400) -> store (404/409) -> response.

One module per part of that pipeline, each a mixin of :class:`Api`:

==================  ==========================================================================
``core``            the pipeline up to the verb: authenticate, route, authorize, faults
``wire``            Request, Response, Route and the helpers every verb shares
``discovery``       ``/version``, ``/api``, ``/apis``, OpenAPI, ``metrics.k8s.io``
``reads``           get, list, Tables
``subresources``    ``pods/log`` and ``services/proxy``
``watch``           watch streams, bookmarks, injected watch faults
``writes``          decoding, pruning, validation: the steps every write shares
``create``          POST and its admission (memoised for custom objects)
``update``          PUT, PATCH and server-side apply
``delete``          DELETE one object or a collection
==================  ==========================================================================
"""

from kubesim.api.core import Api
from kubesim.api.wire import Request, Response, StreamWriter

__all__ = ["Api", "Request", "Response", "StreamWriter"]
