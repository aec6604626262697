"""dpbench: where SGLang's PrefillDelayer negotiation sits, and what that does to DP-attention serving."""

__version__ = "0.1.0"
