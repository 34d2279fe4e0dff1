"""Muster: gang scheduling for distributed training on Amazon EKS."""

__version__ = "0.1.0"
