"""The in-cluster agent: it watches workloads, pods and nodes, and sends their status."""
