# The two commands a newcomer needs: `make book` and `make test`. Both create .venv and install the
# package with its book and test extras (pyproject.toml), pinned by constraints.txt, first.
# While you work: `make check` (every lint check of `make test`, the fast unit tests) answers in under a minute.
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -c
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
CONSTRAINTS ?= constraints.txt
NOTEBOOKS := $(wildcard notebooks/*.ipynb)
PYTEST := $(BIN)/python -m pytest -p no:cacheprovider
REPORTS := _build/reports

.PHONY: help install playground check book test lint unit book-tests notebooks notebooks-portable book-strict browser \
	execute student benchmark results lab checkpoints lock clean fresh-clone

help:
	@echo "The two a newcomer needs:"
	@echo "  make book         build the website into _build/html"
	@echo "  make test         everything: lint, all unit tests, notebook rules, every notebook under nbval"
	@echo "                    (twice: here and on other CPU kernels), strict book build, browser tests"
	@echo "While you work:"
	@echo "  make check        every lint check of make test and the fast unit tests (< 1 min)"
	@echo "  make install      create .venv and install the package with its book and test extras, pinned"
	@echo "                    (torch's CPU build on Linux without a GPU; TORCH_BACKEND=cuda|cu126|cpu to choose)"
	@echo "  make execute      re-execute every notebook in place so its stored outputs are fresh, then"
	@echo "                    rewrite their plain copies for Colab and GitHub (colab/, tools/plain_notebooks.py)"
	@echo "  make lab          JupyterLab, opened on colab/ (the chapters as a learner reads them)"
	@echo "  make clean        remove _build and the test caches"
	@echo "  make fresh-clone  clone main into a temporary folder and run make book and make test there"
	@echo "The stages of make test, one at a time:"
	@echo "  make lint         ruff, the notebooks' setup cells and Colab copies, lint-js and lint-actions"
	@echo "  make lint-js      ESLint over the playgrounds' JavaScript (needs npm)"
	@echo "  make lint-actions actionlint over .github/workflows"
	@echo "  make unit         tests/unit"
	@echo "  make book-tests   tests/book: notebook rules, grading, slides, student edition, portability"
	@echo "  make notebooks    every notebook under nbval"
	@echo "  make notebooks-portable  the same on ATen's portable kernels, MKL at SSE4.2, one thread"
	@echo "  make book-strict  the website built with every warning an error"
	@echo "  make browser      tests/browser in Chromium over the strict build"
	@echo "  make playground   the playgrounds' ONNX models and onnxruntime-web, in _build/playground (needs npm)"
	@echo "Teaching a course:"
	@echo "  make student      write the student edition (no solutions) to _build/student"
	@echo "  make slides       one reveal.js slide deck per chapter, to _build/slides (works offline; needs npm)"
	@echo "  make wheelhouse   every wheel a lab machine without internet needs, to _build/wheelhouse"
	@echo "  make assignment   each chapter's nbgrader assignment and the student release, in course/ (CHAPTERS=\"00 05\")"
	@echo "  make grade SUBMISSIONS=folder  autograde folder/<student>/NN_name.ipynb, each in a bubblewrap sandbox:"
	@echo "                    gradebook, CSVs, feedback (TRUSTED=1: no sandbox, for a class you trust)"
	@echo "Measuring and maintaining:"
	@echo "  make benchmark    notebook times as ratios to a fixed reference; attention, KV-cache, optimizer and speculative-decoding timings"
	@echo "  make results      make test, make benchmark and a timed make check, then write docs/results.md"
	@echo "  make check-timed  make check, timed, its wall time in _build/reports for docs/results.md"
	@echo "  make checkpoints  retrain the shipped checkpoints from their recipes (transformer_lib/recipes.py)"
	@echo "  make lock         re-resolve constraints.txt from pyproject.toml (keeps current pins that still fit)"

$(STAMP): requirements.txt $(CONSTRAINTS) pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	@# the CPU build of torch on a machine without a GPU (tools/torch_index.py; TORCH_BACKEND=cuda for CUDA)
	TORCH_ARGS="$$($(PYTHON) tools/torch_index.py)" && \
		$(BIN)/python -m pip install --quiet -e ".[book,test]" -c $(CONSTRAINTS) $$TORCH_ARGS
	@# pip compiles what it installs, but not an editable package: compile it once here, so that a kernel started
	@# with PYTHONDONTWRITEBYTECODE set does not compile the package's sources again (0.1 to 0.2 s per notebook)
	$(BIN)/python -m compileall -q transformer_lib
	touch $(STAMP)

install: $(STAMP)

# Triton (the `triton` extra, about 0.7 GB installed): its FlashAttention kernels run in Triton's interpreter on a CPU and
# compiled on an NVIDIA GPU (transformer_lib/flash_triton.py). The tests need it, the website does not, so only
# the stages that run them install it; without it, outside CI, those tests skip and say why.
TRITON_STAMP := $(VENV)/.installed-triton
$(TRITON_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -e ".[triton]" -c $(CONSTRAINTS)
	touch $(TRITON_STAMP)

# The one npm guard: $(call with_npm,WHAT,FILE,COMMAND) runs COMMAND when FILE (installed from npm) is there
# and node runs; otherwise it fails under CI=true (.ci/run installs npm), or says loudly what was skipped.
define with_npm
	@if [ -e $(2) ] && command -v node >/dev/null 2>&1; then \
		$(3); \
	elif [ "$$CI" = "true" ]; then \
		echo "CI=true: node and npm are needed for $(1) (apt-get install nodejs npm)"; exit 1; \
	else \
		echo "!!! $(1) SKIPPED: npm not found, so nothing was done for it."; \
		echo "!!! Install node and npm (apt-get install nodejs npm), then run the same make target again."; \
	fi
endef

# The website's npm packages (axe-core for the accessibility tests), pinned by package-lock.json.
# Without npm the accessibility tests skip loudly; under CI=true they fail (.ci/run installs npm).
NPM_STAMP := node_modules/.package-lock.json
$(NPM_STAMP): package.json package-lock.json
	@if command -v npm >/dev/null 2>&1; then npm ci --no-audit --no-fund; \
	else echo "npm not found: the accessibility tests will be SKIPPED (apt-get install nodejs npm)"; fi

# The playgrounds' files (book/playground/): onnxruntime-web from npm and the shipped models as ONNX, with
# PyTorch's answers for the browser tests, in _build/playground (tools/build_playground.py, one module per page
# in tools/playground_build/, the pages' defaults from book/_static/playground/defaults.json). Without npm
# the rest of the book builds and the playground is skipped loudly; under CI=true that is a failure.
PLAYGROUND := _build/playground/models/meta.json
$(PLAYGROUND): $(STAMP) $(NPM_STAMP) tools/build_playground.py $(wildcard tools/playground_build/*.py) \
		book/_static/playground/defaults.json transformer_lib/export.py transformer_lib/inside.py \
		$(wildcard transformer_lib/checkpoints/*.pt)
	$(call with_npm,THE PLAYGROUNDS,node_modules/onnxruntime-web/dist/ort.wasm.min.mjs,$(BIN)/python tools/build_playground.py)

playground: $(PLAYGROUND)

# The website's own JavaScript (the playgrounds' modules), linted by ESLint from npm (eslint.config.mjs),
# with no warning allowed. Without npm it is skipped loudly; under CI=true that is a failure.
.PHONY: lint-js
lint-js: $(NPM_STAMP)
	$(call with_npm,THE JAVASCRIPT LINT,node_modules/.bin/eslint,node_modules/.bin/eslint --max-warnings 0 book/_static/playground eslint.config.mjs)

# The fast loop: the unit tests that take under a second, two at a time with one thread each (two threads each on
# two cores would wait on each other), after the lint; without nbval's plugin and the TRL comparisons, whose imports
# alone take seconds. Under a minute on this machine; make test runs them all.
check: lint $(TRITON_STAMP)
	OMP_NUM_THREADS=1 $(PYTEST) tests/unit -m "not slow" -q -n 2 -p no:nbval --ignore=tests/unit/test_alignment_trl.py

book: $(STAMP) playground
	$(BIN)/jupyter-book build .
	@[ -f $(PLAYGROUND) ] || echo "!!! PLAYGROUND SKIPPED: built without npm, the playground pages will say they cannot start."
	@echo "The website is in _build/html/index.html"

# The stages of `make test`, run one after another by a sub-make even under `make -j2 test`: they
# share _build/ and this machine's two cores, and the notebook times they print are figures that a
# second job beside them would spoil. So `make -j2 test` gives the same result as `make test`.
# Each stage writes its report to _build/reports/ for tools/results.py.
TEST_STAGES := lint unit book-tests notebooks notebooks-portable book-strict browser
test: $(STAMP)
	@$(MAKE) --no-print-directory -j1 $(TEST_STAGES)
	@echo "make test: all checks passed"

lint: $(STAMP) lint-js lint-actions
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python tools/setup_cell.py
	$(BIN)/python tools/plain_notebooks.py

unit: $(STAMP) $(TRITON_STAMP)
	$(PYTEST) tests/unit --junitxml=$(REPORTS)/junit-unit.xml

book-tests: $(STAMP)
	$(PYTEST) tests/book -n 2 --dist loadfile --junitxml=$(REPORTS)/junit-book.xml

NBVAL := $(PYTEST) --nbval notebooks --nbval-sanitize-with tests/nbval_sanitize.cfg --nbval-cell-timeout=300

notebooks: $(STAMP)
	NOTEBOOK_REPORT=$(REPORTS)/notebooks.json $(NBVAL) --junitxml=$(REPORTS)/junit-notebooks.xml

# The same notebooks on other CPU kernels: ATen's portable code path instead of AVX2/AVX-512, MKL
# held to SSE4.2, one thread. Sums round differently there, as they do on another machine; every
# compared output must still match (README, "Same results on every machine"). Each kernel has one
# thread, so two notebooks run at once (pytest-xdist, each notebook whole on one worker): the pass
# takes about half as long on two cores.
PORTABLE_ENV := ATEN_CPU_CAPABILITY=default MKL_ENABLE_INSTRUCTIONS=SSE4_2 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
notebooks-portable: $(STAMP)
	$(PORTABLE_ENV) NOTEBOOK_REPORT=$(REPORTS)/notebooks-portable.json $(NBVAL) -n 2 --dist loadfile \
		--junitxml=$(REPORTS)/junit-notebooks-portable.xml

book-strict: $(STAMP) playground
	$(BIN)/jupyter-book build . --all -W -n --keep-going

# over the strict build's _build/html; skipped loudly without Chromium, failed under CI=true
browser: $(STAMP) $(NPM_STAMP) book-strict
	$(PYTEST) tests/browser -rs --junitxml=$(REPORTS)/junit-browser.xml

execute: $(STAMP)
	$(BIN)/python tools/setup_cell.py --write
	@for nb in $(NOTEBOOKS); do \
		echo "executing $$nb"; \
		$(BIN)/jupyter nbconvert --to notebook --execute --inplace --ExecutePreprocessor.timeout=300 "$$nb" || exit 1; \
	done
	$(BIN)/python tools/plain_notebooks.py --write

student: $(STAMP)
	$(BIN)/python tools/student_edition.py --out _build/student

# One reveal.js deck per chapter, from its notebook with the stored outputs, in _build/slides (index.html
# links them; tools/slides.py). reveal.js comes from npm (package-lock.json), MathJax from the book extra,
# so the decks work offline. Without npm the decks are skipped loudly; under CI=true that is a failure.
.PHONY: slides
slides: $(STAMP) $(NPM_STAMP)
	$(call with_npm,THE SLIDES,node_modules/reveal.js/dist/reveal.js,$(BIN)/python tools/slides.py --out _build/slides)

# Every wheel that a lab machine without internet needs for `pip install --no-index --find-links wheelhouse
# "transformer_lib[book]"` (book/instructors.md): the package's own wheel, built from a copy of it, and its
# book extra's dependencies pinned by constraints.txt, in _build/wheelhouse (tools/wheelhouse.py).
.PHONY: wheelhouse
wheelhouse: $(STAMP)
	$(BIN)/python tools/wheelhouse.py --out _build/wheelhouse

# Grading a class with nbgrader (tools/grading.py; book/instructors.md walks through it). `make assignment`
# writes each chapter's assignment and the student release into $(COURSE)/ (CHAPTERS="00 05" for some of
# them, POINTS per exercise, GRADE_TIMEOUT seconds per cell when grading); `make grade SUBMISSIONS=folder`
# autogrades folder/<student>/NN_name.ipynb into the gradebook, each kernel in a bubblewrap sandbox (TRUSTED=1 to
# grade a class you trust without one), then writes the CSVs and the feedback.
COURSE ?= course
TRUSTED ?=
CHAPTERS ?=
POINTS ?= 1
GRADE_TIMEOUT ?= 15
.PHONY: assignment grade
assignment: $(STAMP)
	$(BIN)/python tools/grading.py --course $(COURSE) release $(if $(CHAPTERS),--chapters $(CHAPTERS)) \
		--points $(POINTS) --timeout $(GRADE_TIMEOUT)

grade: $(STAMP)
	@[ -n "$(SUBMISSIONS)" ] || { echo "usage: make grade SUBMISSIONS=folder (folder/<student>/NN_name.ipynb)"; exit 1; }
	$(BIN)/python tools/grading.py --course $(COURSE) grade $(SUBMISSIONS) $(if $(TRUSTED),--trusted)

benchmark: $(STAMP)
	@mkdir -p $(REPORTS)
	$(BIN)/python benchmarks/notebooks.py | tee $(REPORTS)/benchmark-notebooks.txt
	$(BIN)/python benchmarks/attention.py | tee $(REPORTS)/benchmark-attention.txt
	$(BIN)/python benchmarks/optimizer.py | tee $(REPORTS)/benchmark-optimizer.txt
	OMP_NUM_THREADS=1 $(BIN)/python benchmarks/speculative.py | tee $(REPORTS)/benchmark-speculative.txt
	@[ -f _build/html/book/playground/language_model.html ] || $(MAKE) --no-print-directory book
	$(BIN)/python benchmarks/playground.py | tee $(REPORTS)/benchmark-playground.txt

# docs/results.md, from a real run: every test stage, then the benchmarks, then tools/results.py.
results: $(STAMP)
	@$(MAKE) --no-print-directory test
	@$(MAKE) --no-print-directory benchmark
	@$(MAKE) --no-print-directory check-timed
	$(BIN)/python tools/results.py

# make check's wall time, lint included, for docs/results.md (the goal: under 60 s on 2 cores)
.PHONY: check-timed
check-timed: $(STAMP)
	@mkdir -p $(REPORTS)
	@start=$$(date +%s%N); $(MAKE) --no-print-directory check > $(REPORTS)/check.log 2>&1; status=$$?; \
		tenths=$$(( ($$(date +%s%N) - start) / 100000000 )); \
		printf 'make check, the lint and then the unit tests not marked slow: %d.%d s wall (goal: under 60 s on 2 cores)\n%s\n' \
		$$(( tenths / 10 )) $$(( tenths % 10 )) "$$(tail -1 $(REPORTS)/check.log)" | tee $(REPORTS)/benchmark-check.txt; \
		exit $$status

lab: $(STAMP)
	$(BIN)/python tools/lab.py

checkpoints: $(STAMP)
	$(BIN)/python tools/train_checkpoints.py

# A real resolver (uv) over pyproject.toml's dependencies and extras. Pins already in
# constraints.txt are kept where they still satisfy; torch is the CPU build of the pinned version.
lock: $(STAMP)
	$(BIN)/python -m pip install --quiet "uv>=0.5"
	$(BIN)/python -m uv pip compile pyproject.toml --extra book --extra test --python-version 3.11 \
		--custom-compile-command "make lock" --no-annotate --output-file $(CONSTRAINTS) --quiet

fresh-clone:
	tools/fresh_clone.sh

clean:
	rm -rf _build .pytest_cache .hypothesis test-artifacts

# The GitHub Actions workflows, checked by actionlint (from the test extra; it runs shellcheck on run: steps
# when shellcheck is installed).
.PHONY: lint-actions
lint-actions: $(STAMP)
	$(BIN)/actionlint .github/workflows/*.yml
