// The page over taskret's retrieval service: one form, the service's own endpoints, nothing from elsewhere.
// Documents and examples are untrusted input: every text reaches the page through textContent (el() below),
// never as markup.
"use strict";

let health = null;
let lastPrompt = null; // the /prompt request behind the prompt shown, for /generate

const $ = (id) => document.getElementById(id);

// An element with attributes and children; strings become text nodes, so they are shown, never parsed.
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (name === "className") node.className = value;
    else node.setAttribute(name, value);
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(typeof child === "string" ? document.createTextNode(child) : child);
  }
  return node;
}

function score(value) {
  return value === null || value === undefined ? "-" : value.toFixed(4);
}

function setStatus(node, text, isError) {
  node.textContent = text;
  node.classList.toggle("error", Boolean(isError));
}

// POST a JSON body; resolve with the answer's JSON, or throw with the message the service gives.
async function post(path, body) {
  const response = await fetch(path, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });
  let answer = null;
  try {
    answer = await response.json();
  } catch (err) {
    answer = null;
  }
  if (!response.ok) {
    const message = answer && (answer.message || answer.detail);
    throw new Error(`${path} answered ${response.status}: ${message || response.statusText}`);
  }
  return answer;
}

// The set selection that chooses a prompt's demonstrations (null: the ranking's top), as one line of text.
function selectionText(selection) {
  if (!selection) return "none: the ranking's top, in order";
  const scale = selection.ceil_scale_factor === undefined || selection.ceil_scale_factor === null ? ""
    : `, CEIL scale factor ${selection.ceil_scale_factor}`;
  return `${selection.method} at weight ${selection.weight}${scale}, chosen from the top ${selection.n_candidates}`;
}

function describe(h) {
  const parts = [`${h.kind} index`, h.retriever, `${h.n} items`];
  if (h.rerank) {
    const fusion = h.rerank_weight === undefined || h.rerank_weight === null ? "its order alone"
      : `fused, first stage ${h.rerank_weight}`;
    parts.push(`reranked by ${h.rerank} (top ${h.rerank_depth}, ${fusion})`);
  }
  if (h.kind === "examples") parts.push(`prompt budget ${h.token_budget} tokens (${h.token_counter})`);
  if (h.selection) parts.push(`selects with ${selectionText(h.selection)}`);
  if (h.generate) parts.push(`generates with ${h.generate}`);
  return parts.join(" \u00b7 ");
}

async function loadHealth() {
  const response = await fetch("health");
  health = await response.json();
  $("about").textContent = describe(health);
  const examples = health.kind === "examples";
  $("instruction-field").hidden = examples;
  $("budget-field").hidden = !examples;
  if (!examples && health.instruction) $("instruction").value = health.instruction;
  $("generate-box").hidden = !health.generate;
  $("submit").textContent = examples ? "Retrieve and build the prompt" : "Retrieve";
  $("submit").disabled = false;
}

function rankChange(finalRank, firstRank) {
  if (firstRank === finalRank) return el("span", { className: "muted" }, "=");
  const up = firstRank > finalRank;
  return el("span", { className: up ? "up" : "down" }, `${up ? "\u2191" : "\u2193"}${Math.abs(firstRank - finalRank)}`);
}

function itemCell(answer, i) {
  const cell = el("td", { className: "text" });
  if (answer.titles && answer.titles[i]) cell.append(el("span", { className: "title" }, answer.titles[i]));
  cell.append(el("span", { className: "body" }, answer.texts[i]));
  if (answer.outputs) cell.append(" \u2192 ", el("span", { className: "output" }, answer.outputs[i]));
  return cell;
}

function renderResults(answer, prompt) {
  const reranked = Array.isArray(answer.first_stage_ranks);
  const head = $("results-head");
  head.replaceChildren();
  const columns = ["rank", "id", reranked ? "reranked score" : "score"];
  if (reranked) columns.push("first-stage rank", "first-stage score");
  columns.push(answer.outputs ? "example (input \u2192 output)" : "document");
  if (prompt) columns.push("in the prompt");
  for (const name of columns) head.append(el("th", { scope: "col" }, name));

  const inPrompt = new Map();
  if (prompt) prompt.ids.forEach((id, position) => inPrompt.set(id, position + 1));
  const leftOut = new Set(prompt ? prompt.left_out : []);
  const body = $("results-body");
  body.replaceChildren();
  answer.ids.forEach((id, i) => {
    const row = el("tr", { "data-id": id },
      el("td", { className: "num rank" }, String(i + 1)),
      el("td", { className: "id" }, id),
      el("td", { className: "num score" }, score(answer.scores[i])));
    if (reranked) {
      const firstRank = answer.first_stage_ranks[i];
      row.append(el("td", { className: "num first-rank" }, String(firstRank), " ", rankChange(i + 1, firstRank)),
        el("td", { className: "num first-score" }, score(answer.first_stage_scores[i])));
    }
    row.append(itemCell(answer, i));
    if (prompt) {
      const position = inPrompt.get(id);
      const text = position ? `yes, demonstration ${position} of ${prompt.ids.length}`
        : leftOut.has(id) ? (prompt.selection ? "no: not selected, or over the token budget"
          : "no: over the token budget") : "no";
      row.append(el("td", { className: "in-prompt" }, text));
    }
    body.append(row);
  });
  const notes = [`searched: "${answer.query}"`];
  if (reranked) notes.push(`reranked by ${health.rerank}; the first stage's rank and score beside the final ones`);
  if (answer.note) notes.push(answer.note);
  $("results-note").textContent = notes.join(" \u00b7 ");
  $("results-section").hidden = false;
}

function renderPrompt(prompt) {
  $("prompt-meta").textContent = `${prompt.n_tokens} of ${prompt.token_budget} tokens (${prompt.token_counter}); `
    + `${prompt.ids.length} demonstration${prompt.ids.length === 1 ? "" : "s"} fitted the budget`;
  $("selection-note").textContent = `selection: ${selectionText(prompt.selection)}`;
  const demos = $("demos");
  demos.replaceChildren();
  prompt.ids.forEach((id, i) => {
    demos.append(el("li", { "data-id": id }, el("span", { className: "id" }, id), ": ", prompt.texts[i], " \u2192 ",
      el("span", { className: "output" }, prompt.outputs[i])));
  });
  if (!prompt.ids.length) demos.append(el("li", { className: "muted" }, "none: the prompt is zero-shot"));
  const shown = prompt.left_out.slice(0, 10).join(", ");
  const more = prompt.left_out.length > 10 ? ` and ${prompt.left_out.length - 10} more` : "";
  const by = prompt.selection ? "the selection or the token budget" : "the token budget";
  $("left-out").textContent = prompt.left_out.length
    ? `left out by ${by} (retrieval order): ${shown}${more}` : "no retrieved example was left out";
  $("prompt").textContent = prompt.prompt;
  $("generation").hidden = true;
  setStatus($("generate-status"), "", false);
  $("prompt-section").hidden = false;
}

async function search(event) {
  event.preventDefault();
  const query = $("query").value;
  const k = Number($("k").value);
  if (!query.trim()) {
    setStatus($("status"), "type a query first", true);
    return;
  }
  const request = { query, k };
  const instruction = $("instruction").value;
  if (health.kind !== "examples" && instruction.trim()) request.instruction = instruction;
  $("submit").disabled = true;
  setStatus($("status"), "searching...", false);
  try {
    let prompt = null;
    const answer = await post("retrieve", request);
    if (health.kind === "examples") {
      lastPrompt = { input: query, max_demos: k };
      const budget = $("token-budget").value;
      if (budget) lastPrompt.token_budget = Number(budget);
      prompt = await post("prompt", lastPrompt);
      renderPrompt(prompt);
    }
    renderResults(answer, prompt);
    setStatus($("status"), `${answer.ids.length} result${answer.ids.length === 1 ? "" : "s"}`, false);
  } catch (err) {
    setStatus($("status"), err.message, true);
  } finally {
    $("submit").disabled = false;
  }
}

async function generate() {
  if (!lastPrompt) return;
  const button = $("generate");
  button.disabled = true;
  setStatus($("generate-status"), `generating with ${health.generate}...`, false);
  try {
    const answer = await post("generate", lastPrompt);
    if (answer.prompt !== $("prompt").textContent) renderPrompt(answer); // built for the answer's room
    $("generation").textContent = answer.generation;
    $("generation").hidden = false;
    setStatus($("generate-status"), `${answer.lm}, greedy, at most ${answer.max_new_tokens} new tokens, cut at the `
      + `first newline; ${answer.elapsed_s} s`, false);
  } catch (err) {
    setStatus($("generate-status"), err.message, true);
  } finally {
    button.disabled = false;
  }
}

document.addEventListener("DOMContentLoaded", () => {
  $("search").addEventListener("submit", search);
  $("generate").addEventListener("click", generate);
  loadHealth().catch((err) => setStatus($("status"), `health: ${err.message}`, true));
});
