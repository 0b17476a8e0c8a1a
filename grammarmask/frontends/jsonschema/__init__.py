"""JSON Schema compiler internals (use grammarmask.frontends.json_schema.JsonSchema)."""
