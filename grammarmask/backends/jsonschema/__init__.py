"""JSON Schema compiler internals (use grammarmask.backends.json_schema.JsonSchema)."""
