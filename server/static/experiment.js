// The run view of one experiment: the progress bar and the loss curve, drawn from the stored
// samples and extended live by "progress" events (pages.js forwards them as "live:event").
"use strict";

(function () {
  const section = document.getElementById("run-progress");
  const svg = document.getElementById("loss-curve");
  if (!section || !svg) return;
  const experiment = Number(document.body.dataset.liveExperiment);
  const bar = document.getElementById("run-bar");
  const fractionOut = document.getElementById("run-fraction");
  const facts = document.getElementById("run-facts");
  const NS = "http://www.w3.org/2000/svg";
  const W = 600, H = 220, LEFT = 52, RIGHT = 12, TOP = 12, BOTTOM = 30;

  // Samples as the page embeds them: [step, loss, fraction, elapsed_s, phase, tokens_per_s].
  let samples = JSON.parse(document.getElementById("progress-data").textContent);
  let attempt = Number(section.dataset.attempt || 0);
  let run = Number(section.dataset.run || 0);
  const runLabel = document.getElementById("progress-run");

  function el(name, attributes, text) {
    const node = document.createElementNS(NS, name);
    for (const [key, value] of Object.entries(attributes)) node.setAttribute(key, value);
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function fmt(value) {
    return Math.abs(value) >= 100 ? value.toFixed(0) : value.toPrecision(3);
  }

  function draw() {
    for (const node of [...svg.childNodes]) if (node.nodeName !== "title") node.remove();
    const points = samples.filter((s) => s[1] !== null);
    svg.dataset.points = String(points.length);
    if (points.length === 0) {
      svg.append(el("text", { x: W / 2, y: H / 2, class: "empty" }, "no loss reported yet"));
      return;
    }
    const maxStep = Math.max(1, ...points.map((s) => s[0]));
    let low = Math.min(...points.map((s) => s[1]));
    let high = Math.max(...points.map((s) => s[1]));
    if (high - low < 1e-9) { low -= 0.5; high += 0.5; }
    const x = (step) => LEFT + (W - LEFT - RIGHT) * (step / maxStep);
    const y = (loss) => H - BOTTOM - (H - TOP - BOTTOM) * ((loss - low) / (high - low));
    const axis = el("g", { class: "axis" });
    axis.append(el("line", { x1: LEFT, x2: W - RIGHT, y1: H - BOTTOM, y2: H - BOTTOM }));
    axis.append(el("line", { x1: LEFT, x2: LEFT, y1: TOP, y2: H - BOTTOM }));
    axis.append(el("text", { x: LEFT - 6, y: y(high), class: "y" }, fmt(high)));
    axis.append(el("text", { x: LEFT - 6, y: y(low), class: "y" }, fmt(low)));
    axis.append(el("text", { x: LEFT, y: H - 10, class: "x" }, "0"));
    axis.append(el("text", { x: W - RIGHT, y: H - 10, class: "x end" }, "step " + maxStep));
    svg.append(axis);
    const d = points.map((s, i) => (i ? "L" : "M") + x(s[0]).toFixed(1) + " " + y(s[1]).toFixed(1)).join("");
    svg.append(el("path", { d, class: "loss" }));
    const last = points[points.length - 1];
    svg.append(el("circle", { cx: x(last[0]).toFixed(1), cy: y(last[1]).toFixed(1), r: 3, class: "loss-head" }));
  }

  function showLatest() {
    const last = samples[samples.length - 1];
    const fraction = last ? Math.min(1, Math.max(0, last[2])) : 0;
    bar.value = fraction;
    bar.textContent = fractionOut.textContent = (fraction * 100).toFixed(1) + " %";
    if (last) {
      const parts = ["step " + last[0]];
      if (last[1] !== null) parts.push("loss " + last[1].toFixed(4));
      if (last[5] !== null && last[5] !== undefined) parts.push(Math.round(last[5]).toLocaleString() + " tokens/s");
      parts.push(last[4]);
      facts.textContent = parts.join(", ");
    }
  }

  document.addEventListener("live:event", (event) => {
    const { type, data } = event.detail;
    if (data.experiment_id !== experiment) return;
    if (type === "started" || (type === "progress" && (data.attempt !== attempt || data.run !== run))) {
      // A new run or attempt starts its curve afresh (the stored samples are the latest's).
      attempt = data.attempt;
      run = data.run;
      if (runLabel) runLabel.textContent = "run " + run;
      samples = [];
      section.dataset.active = "true";
    }
    if (type === "progress") {
      samples.push([data.step, data.loss, data.fraction, data.elapsed_s, data.phase, data.tokens_per_s]);
      draw();
      showLatest();
    } else if (type !== "started" && type !== "queued") {
      section.dataset.active = "false";
    }
  });

  draw();
})();
