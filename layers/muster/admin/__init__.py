"""The administrator's work behind `status`, `describe`, `settings`, `reactivate`, `release`.

It works against a deployed stack: the stack's outputs name the ingest
function, and that function's environment names the table, the admission queue
and the deployment's settings, so the commands read and write exactly what the
functions use (`deployment`). With an endpoint it talks to a local deployment
(`muster local`, or `python -m infra.deploy_local --serve`) instead of AWS.

`deployment` finds the stack and loads its settings (one path, one behaviour for
a bad settings record), one module per command does its work and returns a view
or raises an `errors.AdminError`, `render` turns views into text. The commands
themselves (arguments, printing, exit codes) are in `muster.cli`. Nothing here
decides anything: views come from `muster.runtime.views`, settings are validated
by the core's parser, and `reactivate` goes through the same `ControlPlane` as
the Lambdas.
"""
