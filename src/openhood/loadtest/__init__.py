"""Load testing as a product feature: open/closed-loop load generation, latency statistics per
input-length bucket, an SLO verdict, rate sweeps, HTML reports, and a py-spy profiling hook.

It is a *client* of the server (HTTP only) and knows nothing of its internals.
"""
