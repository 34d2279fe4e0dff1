# The two commands a newcomer needs: `make demo` and `make test`.
# Each creates the virtual environment it needs on first use.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
DEMO_STAMP := $(VENV)/.installed-demo

export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20

.PHONY: help venv demo simulate test unit lint typecheck format lock bench bench-sim bench-ingest bench-agent bench-cost bench-faults bench-faults-aws bench-ledger bench-layer bench-hold bench-capacity bench-fit bench-topology bench-topology-plan bench-scale agent-image bench-faults-sim bench-tune bench-tune-month bench-delay clean

help:
	@echo "make demo       the whole control plane on this machine, on its built-in story (installs what it needs)"
	@echo "make simulate   the simulator on its built-in scenarios: none vs gang vs gang+blockAdmission vs gang+capacityCheck"
	@echo "make test       lint, type-check and run the whole test suite"
	@echo "make unit       only the fast unit tests"
	@echo "make lint       ruff"
	@echo "make typecheck  mypy"
	@echo "make format     ruff format + autofix"
	@echo "make bench      run all benchmarks"
	@echo "make bench-sim  simulator throughput and the Philly week's wall time"
	@echo "make bench-ingest  a 1,024-pod gang's events through the ingest path on moto"
	@echo "make bench-agent   what the agent's coalescing and batching save on a gang start"
	@echo "make bench-cost    AWS requests and list-price cost of a 64-pod gang's lifecycle (local mode)"
	@echo "make bench-faults  10,000 perturbed cluster histories with every trigger through the control plane: divergences, triggers drawn, events/s"
	@echo "make bench-faults-aws  the AWS runtime under injected faults (crashes, conflicts, throttling, lost messages): invariants"
	@echo "make bench-ledger  an admission pass with 10,000 active workloads on moto"
	@echo "make bench-layer   the Lambda layer's size and each handler's cold import time"
	@echo "make lock       re-resolve the locked dependencies of the Lambda layer and the agent image (requirements/*.lock)"
	@echo "make bench-hold    CPU used by an idle muster local --hold"
	@echo "make agent-image   build the agent image and push it to the stack's repository (needs Docker; STACK=, REGION=)"
	@echo "make bench-capacity  the admission pass's cost with capacityCheck: wall time (1,000 pending, 500 nodes), DynamoDB reads on moto"
	@echo "make bench-fit     gang vs gang+block vs gang+fit on the deadlock, synthetic and contended Philly scenarios"
	@echo "make bench-topology  gang+fit with and without topology (required, preferred) on three Philly weeks of 8-GPU pods"
	@echo "make bench-topology-plan  one admission plan of 5,000 gangs on 2,000 nodes in blocks, with and without topology"
	@echo "make bench-scale   gangs of 64-4,096 pods, 5,000 queued, 10,000 running reconciled, under AWS's limits, in virtual time"
	@echo "make bench-faults-sim  failure-aware retry on the Philly week with 5% broken jobs (4 runs, a few minutes)"
	@echo "make bench-tune    the docs' 9-setting tuning grid on the Philly week, with and without pruning, and pruned as on AWS (two batches): wall and CPU time, runs pruned; the tuner map's MaxConcurrency from the template"
	@echo "make bench-tune-month  the 27-setting grid (timeout x backoffLimitCount x backoffMaxSeconds) on the 500-node synthetic month, with and without pruning (over an hour of CPU)"
	@echo "make bench-delay   queue delay by gang size: gang against gang+fit (with and without nodePacking) and against workloadFaults (with and without sizeHandicap), on every Philly week"
	@echo "make clean      remove the virtual environment and build output"

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP) $(DEMO_STAMP)

# Only what the demo runs (the local mode: moto, the CDK libraries, the picture):
# no test, lint or type-checking tools and no CDK CLI. A full install serves too.
$(DEMO_STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[local]'
	touch $(DEMO_STAMP)

venv: $(STAMP) node_modules/.installed

# The pinned CDK CLI (package.json); the infrastructure tests run `npx cdk synth`.
node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund --silent
	touch $@

demo: $(DEMO_STAMP)
	$(BIN)/muster local --out out/demo

simulate: $(DEMO_STAMP)
	$(BIN)/muster simulate --builtin all --compare none,gang,gang+block,gang+fit --out out/simulate

# The suite on TEST_WORKERS processes (pytest-xdist; 0: in this one), each taking the
# next test as it finishes one.
TEST_WORKERS ?= 2

test: lint typecheck node_modules/.installed
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist worksteal

unit: $(STAMP)
	$(BIN)/python -m pytest tests/unit -q

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# The layer's dependencies, resolved for the Lambda runtime (CPython 3.12, manylinux
# x86_64) from [project].dependencies, with hashes. Run after changing them;
# `make lock UPGRADE=1` also moves every pin to the newest allowed version.
lock: $(STAMP)
	$(BIN)/uv pip compile pyproject.toml --quiet --generate-hashes \
		--python-version 3.12 --python-platform x86_64-manylinux2014 \
		$(if $(UPGRADE),--upgrade) --output-file requirements/layer.lock
	$(BIN)/uv pip compile pyproject.toml requirements/agent-build.in --extra agent --quiet \
		--generate-hashes --universal --python-version 3.12 \
		$(if $(UPGRADE),--upgrade) --output-file requirements/agent.lock

bench: bench-sim bench-ingest bench-agent bench-cost bench-faults bench-faults-aws bench-ledger bench-layer bench-hold bench-capacity bench-fit bench-topology bench-topology-plan bench-scale bench-faults-sim bench-tune bench-tune-month bench-delay

bench-sim: $(STAMP)
	$(BIN)/python benchmarks/simulate.py

bench-ingest: $(STAMP)
	$(BIN)/python benchmarks/ingest_1024.py

bench-agent: $(STAMP)
	$(BIN)/python benchmarks/agent_burst.py

bench-cost: venv
	$(BIN)/python benchmarks/cost.py

bench-faults: $(STAMP)
	$(BIN)/python benchmarks/faults.py

bench-faults-aws: $(STAMP)
	$(BIN)/python benchmarks/faults_aws.py

bench-ledger: $(STAMP)
	$(BIN)/python benchmarks/ledger_10k.py

bench-layer: $(STAMP)
	$(BIN)/python benchmarks/layer.py

bench-hold: $(STAMP)
	$(BIN)/python benchmarks/hold_idle_cpu.py

bench-capacity: $(STAMP)
	$(BIN)/python benchmarks/capacity_pass.py

bench-fit: $(STAMP)
	$(BIN)/python benchmarks/fit_compare.py

bench-topology: $(STAMP)
	$(BIN)/python benchmarks/topology_compare.py

bench-topology-plan: $(STAMP)
	$(BIN)/python benchmarks/topology_plan.py

bench-scale: $(STAMP)
	$(BIN)/python benchmarks/scale.py

# The agent image from deploy/agent.Dockerfile, pushed to the ECR repository the
# stack created (its output AgentImageRepositoryUri), tagged with this version.
agent-image: $(STAMP)
	$(BIN)/muster agent-image $(if $(STACK),--stack $(STACK)) $(if $(REGION),--region $(REGION))
bench-faults-sim: $(STAMP)
	$(BIN)/python benchmarks/failure_aware.py

bench-delay: $(STAMP)
	$(BIN)/python benchmarks/delay_by_size.py

bench-tune: $(STAMP)
	$(BIN)/python benchmarks/tune.py

bench-tune-month: $(STAMP)
	$(BIN)/python benchmarks/tune_month.py

clean:
	rm -rf $(VENV) cdk.out out .pytest_cache .mypy_cache .ruff_cache
