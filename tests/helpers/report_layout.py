"""What a report page looks like in Chromium, measured with the browser's own layout: the
texts of each plot (matplotlib writes a text as a group of glyph ``<use>`` elements),
whether any two overlap, leave their figure or enter a panel they do not belong to, and
each plot's error bars (their lengths in pixels) with the size of their panel."""

from __future__ import annotations

# A text is the innermost group with an id holding glyphs; its panel is the axes group
# around it (none for a figure's legend and labels); a panel's area is its background
# patch (the first patch of the axes group). Boxes are client rectangles in CSS pixels;
# an overlap counts when both sides of the intersection exceed half a pixel.
TEXT_LAYOUT = r"""
(() => {
  const EPS = 0.5;
  const glyphs = g => Array.from(g.querySelectorAll('use')).some(
    u => (u.getAttribute('xlink:href') || u.getAttribute('href') || '').includes('DejaVu'));
  const cross = (a, b) => Math.min(a.right, b.right) - Math.max(a.left, b.left) > EPS &&
                          Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top) > EPS;
  const panelOf = node => {
    for (let n = node.parentElement; n; n = n.parentElement) {
      if (n.id && /-axes_\d+$/.test(n.id)) return n.id;
    }
    return null;
  };
  const report = [];
  for (const figure of document.querySelectorAll('figure.plot')) {
    const svg = figure.querySelector('svg');
    const frame = svg.getBoundingClientRect();
    const texts = Array.from(svg.querySelectorAll('g[id]')).filter(
      g => glyphs(g) && !Array.from(g.querySelectorAll('g[id]')).some(glyphs)).map(g => {
        const r = g.getBoundingClientRect();
        return {id: g.id, panel: panelOf(g), box: {left: r.left, right: r.right, top: r.top,
                                                   bottom: r.bottom}};
      });
    const panels = Array.from(svg.querySelectorAll('g[id]')).filter(
      g => /-axes_\d+$/.test(g.id)).map(g => {
        const r = g.querySelector('g[id*="-patch_"] path').getBoundingClientRect();
        return {id: g.id, box: {left: r.left, right: r.right, top: r.top, bottom: r.bottom}};
      });
    const problems = [];
    texts.forEach((t, i) => {
      const b = t.box;
      if (b.left < frame.left - EPS || b.right > frame.right + EPS ||
          b.top < frame.top - EPS || b.bottom > frame.bottom + EPS) {
        problems.push(`${t.id} leaves the figure`);
      }
      for (const other of texts.slice(i + 1)) {
        if (cross(b, other.box)) problems.push(`${t.id} overlaps ${other.id}`);
      }
      for (const p of panels) {
        if (p.id !== t.panel && cross(b, p.box)) problems.push(`${t.id} enters ${p.id}`);
      }
    });
    const errorbars = {};
    for (const g of svg.querySelectorAll('g[id*="-errorbars-"]')) {
      const key = g.id.replace(/^.*-errorbars-/, '');
      const panel = panels.find(p => p.id === panelOf(g));
      errorbars[key] = {
        panel: panel ? [panel.box.right - panel.box.left, panel.box.bottom - panel.box.top] : null,
        paths: Array.from(g.querySelectorAll('path')).map(path => {
          const r = path.getBoundingClientRect();
          return [r.width, r.height];
        })};
    }
    report.push({id: figure.id, texts: texts.length, panels: panels.length,
                 width: frame.width, problems, errorbars});
  }
  return report;
})()
"""
