// Live plots of the last minute, drawn on <canvas> with no library and no build step: the figures the
// stats panel lists, shown as lines so a trend (a playout delay creeping up, misses in bursts) is seen
// at a glance.

const WINDOW_MS = 60_000;

export class Plot {
  constructor(canvas, caption, { unit = "", digits = 0, color = "#3b82f6" } = {}) {
    this.canvas = canvas;
    this.caption = caption;
    this.unit = unit;
    this.digits = digits;
    this.color = color;
    this.points = [];  // [ms since page load, value], oldest first, at most a minute of them
  }

  push(value, t = performance.now()) {
    if (!Number.isFinite(value)) return;
    this.points.push([t, value]);
    while (this.points.length && this.points[0][0] < t - WINDOW_MS) this.points.shift();
    this.caption.textContent = `${value.toFixed(this.digits)}${this.unit}`;
    this.draw(t);
  }

  clear() {
    this.points = [];
    this.caption.textContent = "–";
    this.draw(performance.now());
  }

  draw(now) {
    const { canvas } = this;
    const ctx = canvas.getContext("2d");
    const w = canvas.width;
    const h = canvas.height;
    ctx.clearRect(0, 0, w, h);
    ctx.strokeStyle = "#8884";
    ctx.lineWidth = 1;
    ctx.strokeRect(0.5, 0.5, w - 1, h - 1);
    if (!this.points.length) return;
    const top = Math.max(...this.points.map(([, v]) => v)) * 1.5 || 1;  // a steady line sits at 2/3
    const x = (t) => w - ((now - t) / WINDOW_MS) * w;
    const y = (v) => h - 3 - (v / top) * (h - 6);  // whole pixels for a 2 px line: a zero line stays crisp
    ctx.strokeStyle = this.color;
    ctx.lineWidth = 2;
    ctx.beginPath();
    this.points.forEach(([t, v], i) => (i ? ctx.lineTo(x(t), y(v)) : ctx.moveTo(x(t), y(v))));
    if (this.points.length === 1) ctx.lineTo(x(now) - 2, y(this.points[0][1]));
    ctx.stroke();
    ctx.fillStyle = "#888";
    ctx.font = "10px system-ui, sans-serif";
    ctx.fillText(`${top.toFixed(this.digits)}${this.unit}`, 3, 10);
  }
}

// One plot per `<figure data-plot="name" data-unit=…>` holding a canvas and a figcaption value.
export function livePlots(root, styles = {}) {
  const plots = {};
  root.querySelectorAll("figure[data-plot]").forEach((figure) => {
    const name = figure.dataset.plot;
    plots[name] = new Plot(figure.querySelector("canvas"), figure.querySelector("output"), {
      unit: figure.dataset.unit || "", digits: Number(figure.dataset.digits || 0), ...styles[name],
    });
    plots[name].clear();
  });
  return plots;
}
