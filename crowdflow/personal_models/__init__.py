"""Personal models coupled over an agent graph, fitted by DJAM (see docs/methods/personal_models.md)."""
