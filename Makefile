# The two commands a newcomer needs: `make book` and `make test`. Both create .venv and install
# from requirements.txt, pinned by constraints.txt, before they do anything else.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
CONSTRAINTS ?= constraints.txt
NOTEBOOKS := $(wildcard notebooks/*.ipynb)

.PHONY: help install book test lint unit notebooks notebooks-portable book-strict browser execute student benchmark lock clean fresh-clone

help:
	@echo "make book      build the website into _build/html"
	@echo "make test      lint, unit tests, every notebook under nbval, strict book build"
	@echo "make execute   re-execute every notebook in place so its stored outputs are fresh"
	@echo "make student   write the student edition (no solutions) to _build/student"
	@echo "make benchmark print notebook times as ratios to a fixed reference, attention and KV-cache timings"

$(STAMP): requirements.txt $(CONSTRAINTS) pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.txt -c $(CONSTRAINTS)
	$(BIN)/python -m pip install --quiet --no-deps -e .
	touch $(STAMP)

install: $(STAMP)

book: $(STAMP)
	$(BIN)/jupyter-book build .
	@echo "The website is in _build/html/index.html"

test: lint unit notebooks notebooks-portable book-strict browser
	@echo "make test: all checks passed"

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python tools/setup_cell.py

unit: $(STAMP)
	$(BIN)/python -m pytest tests --ignore=tests/browser

NBVAL := $(BIN)/python -m pytest --nbval notebooks --nbval-sanitize-with tests/nbval_sanitize.cfg \
	--nbval-cell-timeout=300 -p no:cacheprovider

notebooks: $(STAMP)
	$(NBVAL)

# The same notebooks on other CPU kernels: ATen's portable code path instead of AVX2/AVX-512, MKL
# held to SSE4.2, one thread. Sums round differently there, as they do on another machine; every
# compared output must still match (README, "Same results on every machine").
PORTABLE_ENV := ATEN_CPU_CAPABILITY=default MKL_ENABLE_INSTRUCTIONS=SSE4_2 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
notebooks-portable: $(STAMP)
	$(PORTABLE_ENV) $(NBVAL)

book-strict: $(STAMP)
	$(BIN)/jupyter-book build . --all -W -n --keep-going

# needs the strict build's _build/html; skipped loudly without Chromium, failed under CI=true
browser: $(STAMP)
	$(BIN)/python -m pytest tests/browser -rs

execute: $(STAMP)
	$(BIN)/python tools/setup_cell.py --write
	@for nb in $(NOTEBOOKS); do \
		echo "executing $$nb"; \
		$(BIN)/jupyter nbconvert --to notebook --execute --inplace --ExecutePreprocessor.timeout=300 "$$nb" || exit 1; \
	done

student: $(STAMP)
	$(BIN)/python tools/student_edition.py --out _build/student

benchmark: $(STAMP)
	$(BIN)/python benchmarks/notebooks.py
	$(BIN)/python benchmarks/attention.py

lock: $(STAMP)
	@{ echo "# Exact versions that CI tests (generated with pip freeze; regenerate with 'make lock')."; \
	   $(BIN)/python -m pip freeze --exclude-editable | sed 's/+cpu$$//'; } > $(CONSTRAINTS)

fresh-clone:
	tools/fresh_clone.sh

clean:
	rm -rf _build .pytest_cache .hypothesis test-artifacts
