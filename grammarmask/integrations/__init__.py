"""Adapters for model runtimes (imported lazily: torch and transformers are optional)."""
