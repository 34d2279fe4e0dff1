"""AWS adapters of the runtime ports: DynamoDB, Step Functions, SQS, EventBridge, EMF."""
