"""The model boundary's entry point: the proxy is ``certlab_model_boundary.proxy.ModelBoundary``."""

from __future__ import annotations
