"""The tasks file: what each task asks, how its outcome is judged, and what it needs."""
