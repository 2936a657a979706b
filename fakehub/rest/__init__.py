"""fakehub's REST API, one module per resource family, mounted under /api/v3."""
