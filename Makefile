# loaderbench: `make quickstart` runs the pipeline on the embedded default; `make test` runs the tests.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
CORES  ?= $(shell nproc)
CONFIG ?= config/quickstart.yaml
SMK    := $(BIN)/snakemake --cores $(CORES) --configfile $(CONFIG)
# the pipeline with a quiet terminal: a line per cell, Snakemake's output in logs/snakemake/, then the verdict
RUN    := $(BIN)/loaderbench run --config $(CONFIG) --cores $(CORES)

.PHONY: quickstart test test-fast test-dev plan bench ceiling tune engine-report report rerun respread cells lint clean

# The install says one line; the installer's output goes to logs/install.log, whose last lines are shown if it fails.
# scripts/install-venv.sh installs with uv where it honours pip's configuration, else with pip
# (LOADERBENCH_INSTALLER=pip: always pip).
$(STAMP): pyproject.toml examples/threaded-loader/pyproject.toml scripts/install-venv.sh
	@mkdir -p logs
	@printf 'install: loaderbench and its dependencies into $(VENV) (log: logs/install.log) ... '
	@scripts/install-venv.sh '$(PYTHON)' '$(VENV)' > logs/install.log 2>&1 \
	  || { echo FAILED; tail -n 20 logs/install.log; exit 1; }
	@touch $@ && echo "done ($$(tail -n 1 logs/install.log))"

## quickstart: install into .venv, run the whole pipeline on config/quickstart.yaml, print where the bundle is and
## the verdict
quickstart: $(STAMP)
	@$(BIN)/loaderbench validate-config --config $(CONFIG)
	@$(BIN)/loaderbench fuse-check --config $(CONFIG) --install
	@$(RUN)
	@$(BIN)/loaderbench fuse-check --config $(CONFIG)

## test: the test suite (unit tests and real Snakemake runs of a tiny grid on the CPU). FUSE, Chromium and Slurm are
## installed when root and apt can; tests that still lack them skip, and the last line counts them by cause.
test: lint
	-scripts/install-test-deps.sh
	$(BIN)/python -m pytest -q -ra -m "not dev"

## test-fast: the tests that run no real cell, Snakemake, FUSE mount or browser (`-m "not slow"`: a few minutes on 2
## cores), then the time they took; for a loop of changes to the report or the tables. `make test` runs them all.
test-fast: $(STAMP)
	@start=$$(date +%s); $(BIN)/python -m pytest -q -ra -m "not dev and not slow"; status=$$?; \
	  echo "test-fast: $$(( $$(date +%s) - start )) s"; exit $$status

## test-dev: the tests of the offline-GPU-host tooling in dev/ (not the product's)
test-dev: $(STAMP)
	$(BIN)/python -m pytest -q -ra -m dev

## plan: the cells of CONFIG per part, their predicted run time, the fixed costs, the total and the budget
## verdict (HOST_FROM=<records folder>: predict for the host those records came from)
plan: $(STAMP)
	$(BIN)/loaderbench plan --config $(CONFIG) $(if $(HOST_FROM),--host-from $(HOST_FROM))

## bench: loader-only throughput (images/s, model: none) of torchvision and opencv on the same staged files
bench: $(STAMP)
	$(SMK) --until stage
	$(BIN)/loaderbench bench --config $(CONFIG)

## ceiling: the synthetic cell against a bare training loop (harness overhead) and the input layout/dtype costs, for
## each model of CONFIG (MODEL=<model>: that one)
ceiling: $(STAMP)
	$(SMK) --until stage
	$(BIN)/loaderbench ceiling --config $(CONFIG) $(if $(MODEL),--model '$(MODEL)')

## engine-report: what the measured cells cost (overhead per phase) and how far they can be trusted (convergence,
## dp vs ddp, spread of repeats)
engine-report: $(STAMP)
	$(BIN)/loaderbench engine-report

## tune LOADER=<loader>: search that loader's settings on this host (BUDGET_S seconds a model, default 300) against the
## ceiling, for each model of CONFIG unless MODEL says, at the config's precision unless PRECISION says
tune: $(STAMP)
	@test -n "$(LOADER)" || { echo "usage: make tune LOADER=<loader> [MODEL=<model>] [BUDGET_S=300] [PRECISION=fp32|amp]"; exit 2; }
	@$(RUN) -- --until stage
	$(BIN)/loaderbench tune --config $(CONFIG) --loader '$(LOADER)' --budget-s $(or $(BUDGET_S),300) $(if $(MODEL),--model '$(MODEL)') $(if $(PRECISION),--precision '$(PRECISION)')

## respread: rerun once every configuration whose repeats spread over spread_warn or with a contended cell, then refresh the tables
respread: $(STAMP)
	$(SMK)
	$(BIN)/loaderbench respread --config $(CONFIG)
	$(SMK)

## report: Snakemake's HTML report with figure captions
report: $(STAMP)
	$(SMK) --report "$$($(BIN)/loaderbench where report)"

## rerun CELL=<cell id>: measure one configuration again, then refresh the tables, figures and bundle
rerun: $(STAMP)
	@test -n "$(CELL)" || { echo "usage: make rerun CELL=<cell id>  (list them: make cells)"; exit 2; }
	@$(RUN) -- --forcerun "$$($(BIN)/loaderbench where cell '$(CELL)')"

## cells: list the cell ids of CONFIG with their status
cells: $(STAMP)
	$(BIN)/loaderbench cells --config $(CONFIG) --status

## lint: the Python code's lint and formatting (ruff, pyproject.toml), the workflow's formatting (snakefmt) and
## Snakemake's own lint, all clean; part of `make test`
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/snakefmt --check Snakefile workflow
	$(SMK) --lint

## clean: this project's results, logs and Snakemake state, and its staged copies on CONFIG's tiers (RAM included)
clean:
	if [ -x $(BIN)/loaderbench ]; then $(BIN)/loaderbench unstage --config $(CONFIG); fi
	rm -rf results logs .snakemake
