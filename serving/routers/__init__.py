"""One router per concern: health and readiness, and questions."""
