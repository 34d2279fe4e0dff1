"""The local mode: the deployed control plane on one machine, with no AWS account.

moto serves the AWS APIs on localhost, the stack's own template is deployed into
it, and `LambdaRunner` plays the part of Lambda's SQS event source mappings,
calling the real handlers in-process.
"""
