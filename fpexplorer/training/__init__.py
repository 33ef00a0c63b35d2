"""The AMP training engine, its monitor and the run log. No Qt; torch only where a job runs."""
