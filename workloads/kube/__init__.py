"""The Kubernetes backend: a real cluster's API through the official `kubernetes` client.

client (ApiClient per cluster), apply (server-side apply, scale, delete), ingest (Kueue
Workload objects -> Workload rows and events), watch (resumable watch sessions),
checkpoints (checkpoint lines in training logs).
"""
