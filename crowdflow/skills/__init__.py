"""Worker skills and consensus labels from sparse worker x task labels (see docs/methods/skills.md)."""
