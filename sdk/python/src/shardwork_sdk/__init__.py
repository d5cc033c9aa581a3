"""Python SDK of the Shardwork marketplace: sign in with an Ethereum key, quote and post LoRA
fine-tuning jobs, fund them, follow them, and fetch the final adapter.

The request and response models (:mod:`shardwork_sdk.models`) are generated from the API's
OpenAPI description; this package is the thin layer over them.
"""

from . import models
from .auth import DEV_REQUESTER_KEY, siwe_message
from .client import Client
from .errors import ApiError, ChainError, JobNotCompleted, MissingDependency, ShardworkError, TransportError
from .follow import Event
from .funding import ChainFunding
from .results import load_peft

__all__ = [
    "ApiError",
    "ChainError",
    "ChainFunding",
    "Client",
    "DEV_REQUESTER_KEY",
    "Event",
    "JobNotCompleted",
    "MissingDependency",
    "ShardworkError",
    "TransportError",
    "load_peft",
    "models",
    "siwe_message",
]
