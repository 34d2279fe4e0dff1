"""The composition root: what each Lambda function is built from."""
