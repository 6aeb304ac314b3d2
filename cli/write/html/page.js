/*
 * page.js: mha's interactive page (cli/html.c writes it with the run's data).
 *
 * Reads the data from the JSON script element, draws every head's step as a
 * heatmap (canvas cells, DOM labels) or as BertViz-like token lines, and
 * narrates a cell on hover or keyboard focus exactly as 'mha forward
 * --explain --cell' prints it (cli/explain.c's work_cell, line for line,
 * numbers as C's %.*g).  Text from the data only ever goes in through
 * textContent.  No network: nothing is loaded, saving makes a Blob.
 */
(function () {
	'use strict';

	var D = JSON.parse(document.getElementById('mha-data').textContent);
	/* the SVG namespace, from the page's own inline <svg> */
	var SVGNS = document.getElementById('legend-svg').namespaceURI;
	var MAX_TERMS = 12; /* as explain.c */
	var MAX_SUM_TERMS = 32; /* explain.c's too: the terms of a softmax sum shown */
	var NQ = D.n_q, NKV = D.n_kv, DK = D.d_k, DV = D.d_v;
	var QL = D.tokens, KL = D.kv_tokens;

	/* ---- numbers as C's printf("%.*g") (cli/write.c format_number) ---- */

	function fmt(v, P) {
		var e, k, X, s, m, ax;

		if (v !== v)
			return 'nan';
		if (v === Infinity)
			return 'inf';
		if (v === -Infinity)
			return '-inf';
		if (v === 0)
			return '0'; /* no "-0" */
		if (P < 1)
			P = 1;
		e = v.toExponential(P - 1);
		k = e.indexOf('e');
		X = parseInt(e.slice(k + 1), 10);
		if (X < -4 || X >= P) {
			m = e.slice(0, k);
			if (m.indexOf('.') >= 0)
				m = m.replace(/0+$/, '').replace(/\.$/, '');
			ax = Math.abs(X);
			s = m + 'e' + (X < 0 ? '-' : '+') + (ax < 10 ? '0' : '') + ax;
		} else {
			s = v.toFixed(P - 1 - X);
			if (s.indexOf('.') >= 0)
				s = s.replace(/0+$/, '').replace(/\.$/, '');
		}
		return s;
	}
	function g(v) { return fmt(v, D.precision); }
	/* a number as a factor: "(-0.87)" when negative */
	function factor(v) { var s = g(v); return s.charAt(0) === '-' ? '(' + s + ')' : s; }
	function num(v) { return typeof v === 'string' ? (v === 'nan' ? NaN : v === '-inf' ? -Infinity : Infinity) : v; }

	/* ---- the data ---- */

	function f64(s) {
		var bin = atob(s), n = bin.length, bytes = new Uint8Array(n), out, dv, i;

		for (i = 0; i < n; i++)
			bytes[i] = bin.charCodeAt(i);
		dv = new DataView(bytes.buffer);
		out = new Float64Array(n / 8);
		for (i = 0; i < out.length; i++)
			out[i] = dv.getFloat64(8 * i, true);
		return out;
	}

	var SCALE = num(D.scale), CAP = num(D.softcap);
	var SEQS = D.sequences.map(function (s) {
		/* a mask the heads share comes once */
		var shared = s.mask ? f64(s.mask) : null;

		return { title: s.title, offset: s.offset, mask_how: s.mask_how, heads: s.heads.map(function (h) {
			var x = { kv_head: h.kv_head, q: f64(h.q), k: f64(h.k), v: f64(h.v),
				  scores: f64(h.scores), softmax: f64(h.softmax),
				  softcapped: h.softcapped ? f64(h.softcapped) : null,
				  mask: h.mask ? f64(h.mask) : shared }, n = x.scores.length, i, pre;

			/* re-derived as the library makes them (lib/mha.c, lib/rules.h) */
			x.scaled = new Float64Array(n);
			for (i = 0; i < n; i++)
				x.scaled[i] = x.scores[i] * SCALE;
			pre = x.softcapped || x.scaled;
			if (x.mask) {
				x.masked = new Float64Array(n);
				for (i = 0; i < n; i++)
					x.masked[i] = x.mask[i] === -Infinity ? -Infinity : pre[i] + x.mask[i];
			} else {
				x.masked = pre;
			}
			return x;
		}) };
	});
	var STEPS = ['scores', 'scaled'];
	if (CAP > 0)
		STEPS.push('softcapped');
	if (D.mask_how !== null)
		STEPS.push('masked');
	STEPS.push('softmax');

	var st = {
		seq: 0,
		step: STEPS.indexOf(D.step) >= 0 ? D.step : 'softmax',
		head: D.heads > 1 && !D.head ? 'all' : String(D.head ? D.head - 1 : 0),
		view: 'heatmap',
		range: 'default',
		cell: 0,
		query: -1 /* the token view's chosen query */
	};

	/* ---- words ---- */

	function label(labels, i) { return labels ? (i + 1) + ' (' + labels[i] + ')' : String(i + 1); }
	function axisText(labels, i) { return labels ? labels[i] : String(i + 1); }
	function el(tag, cls, text) {
		var e = document.createElement(tag);

		if (cls)
			e.className = cls;
		if (text !== undefined)
			e.textContent = text;
		return e;
	}

	/* The cell (i, j) of head h worked by hand: explain.c's work_cell. */
	function narrate(s, h, i, j) {
		var hd = SEQS[s].heads[h], L = [], t, a, b, c, line, mx = -Infinity, sum = 0,
		    row = hd.masked, w = hd.softmax, r0 = i * NKV, mk, pos, term, sk, ex, vals, prods,
		    largest, terms;

		L.push('  Query ' + label(QL, i) + ' and key ' + label(KL, j) + ', head ' + (h + 1) + ', by hand:');
		if (D.rope)
			L.push('    (q and k after the rotary embedding: --explain --cell shows the rotation)');
		line = '    score   = q' + (i + 1) + ' . k' + (j + 1) + ' =';
		for (t = 0; t < DK; t++) {
			a = factor(hd.q[i * DK + t]);
			b = factor(hd.k[j * DK + t]);
			if (t === MAX_TERMS && DK > MAX_TERMS + 1) {
				line += ' + … (' + DK + ' terms in all)';
				break;
			}
			line += (t ? ' +' : '') + ' ' + a + '*' + b;
		}
		a = g(hd.scores[r0 + j]);
		L.push(line + ' = ' + a);
		c = g(hd.scaled[r0 + j]);
		L.push('    scaled  = ' + a + ' * ' + factor(SCALE) + ' = ' + c);
		if (hd.softcapped)
			L.push('    softcap = ' + g(CAP) + '*tanh(' + c + '/' + g(CAP) + ') = ' + g(hd.softcapped[r0 + j]));
		if (hd.mask) {
			mk = hd.mask[r0 + j];
			a = g(mk);
			b = g(row[r0 + j]);
			if (mk === -Infinity) {
				L.push('    mask    = -inf: query ' + (i + 1) + ' may not see key ' + (j + 1) + ', so masked = -inf');
			} else if (D.alibi) {
				pos = i + 1 + SEQS[s].offset;
				term = num(D.alibi[h]) * ((j + 1) - pos);
				L.push('    ALiBi   = slope*(j - p) = ' + factor(num(D.alibi[h])) + '*(' + (j + 1) + ' - ' + pos + ') = ' + g(term));
				if (D.mask_file)
					L.push('    mask    = ' + g(mk - term) + ' (the mask file) + ALiBi = ' + a + ', so masked = ' + b);
				else
					L.push('    mask    = ' + a + ', so masked = ' + b);
			} else {
				L.push('    mask    = ' + a + ', so masked = ' + b);
			}
		}
		for (t = 0; t < NKV; t++)
			if (row[r0 + t] > mx)
				mx = row[r0 + t];
		if (mx === -Infinity) {
			L.push('    softmax: every key is masked for query ' + (i + 1) + ': its weights are all 0, and so is its output row');
			return L;
		}
		/* "masked" only when a mask was added; every term of the sum shown
		 * (a masked key's as 0) up to MAX_SUM_TERMS, as explain.c does */
		largest = hd.mask ? 'largest masked score' : 'largest score';
		if (D.sinks) {
			sk = num(D.sinks[h]);
			a = g(mx);
			b = g(sk);
			if (sk > mx)
				mx = sk;
			L.push('    softmax: the ' + largest + ' in row ' + (i + 1) + ' is ' + a + ' and the sink is ' + b + ', so m = ' + g(mx) + ';');
			sum = Math.exp(sk - mx);
			line = '      sum = exp(sink - m) + ';
			terms = 1 + NKV;
		} else {
			L.push('    softmax: the ' + largest + ' in row ' + (i + 1) + ' is m = ' + g(mx) + ';');
			line = '      sum = ';
			terms = NKV;
		}
		if (NKV <= 4)
			for (t = 0; t < NKV; t++)
				line += (t ? ' + ' : '') + 'exp(x_' + (t + 1) + ' - m)';
		else
			line += 'exp(x_1 - m) + exp(x_2 - m) + … + exp(x_' + NKV + ' - m)';
		if (terms > 1) {
			line += ' =';
			if (D.sinks)
				line += ' ' + g(sum) + ' +';
		}
		for (t = 0; t < NKV; t++) {
			ex = row[r0 + t] === -Infinity ? 0 : Math.exp(row[r0 + t] - mx);
			sum += ex;
			if (terms === 1 || t > MAX_SUM_TERMS)
				continue;
			if (t === MAX_SUM_TERMS) {
				line += ' + … (' + NKV + ' terms in all)';
				continue;
			}
			line += (t ? ' +' : '') + ' ' + g(ex);
		}
		b = g(sum);
		L.push(line + ' = ' + b);
		if (row[r0 + j] === -Infinity) {
			L.push('      weight ' + (i + 1) + ',' + (j + 1) + ' = 0 (masked)');
			return L;
		}
		c = g(w[r0 + j]);
		L.push('      weight ' + (i + 1) + ',' + (j + 1) + ' = exp(' + g(row[r0 + j]) + ' - m) / sum = ' +
		       g(Math.exp(row[r0 + j] - mx)) + ' / ' + b + ' = ' + c);
		vals = [];
		prods = [];
		for (t = 0; t < DV && t < MAX_TERMS; t++) {
			vals.push(g(hd.v[j * DV + t]));
			prods.push(g(w[r0 + j] * hd.v[j * DV + t]));
		}
		L.push("    output: row " + (i + 1) + " of the head's output is the weighted sum of V" + (hd.kv_head + 1) +
		       "'s rows; key " + (j + 1) + ' adds ' + c + ' * [' + vals.join(', ') + (DV > MAX_TERMS ? ', …' : '') +
		       '] = [' + prods.join(', ') + (DV > MAX_TERMS ? ', …' : '') + ']');
		return L;
	}

	/* ---- colours: cli/heatmap.c's ramp and scale ---- */

	function rgb(t) {
		var x, k, f, c, out = [], A = D.anchors;

		if (!(t > 0))
			t = 0;
		if (t > 1)
			t = 1;
		x = t * (A.length - 1);
		k = Math.floor(x);
		if (k >= A.length - 1)
			k = A.length - 2;
		f = x - k;
		for (c = 0; c < 3; c++)
			out.push(Math.floor(A[k][c] + (A[k + 1][c] - A[k][c]) * f + 0.5));
		return out;
	}
	function css(c) { return 'rgb(' + c[0] + ',' + c[1] + ',' + c[2] + ')'; }
	function values(hd) { return hd[st.step]; }
	/* blocked: the mask is -inf there, once the step is past the mask */
	function blocked(hd, k) {
		var past = st.step === 'masked' || st.step === 'softmax';

		return (past && hd.mask && hd.mask[k] === -Infinity) || values(hd)[k] === -Infinity;
	}
	function shownHeads() {
		var all = [], h;

		if (st.head !== 'all')
			return [Number(st.head)];
		for (h = 0; h < D.heads; h++)
			all.push(h);
		return all;
	}
	/* default: softmax 0 to 1, another step auto; auto: the values shown by the
	 * heads shown, masked cells aside; unit: 0 to 1; given: --range MIN,MAX */
	function scale() { return scaleOf(st.range); }
	function scaleOf(range) {
		var lo = Infinity, hi = -Infinity, hs = shownHeads(), n, k, v, hd;

		if (range === 'given')
			return [num(D.range[0]), num(D.range[1])];
		if (range === 'unit')
			return [0, 1];
		if (range === 'default')
			return st.step === 'softmax' ? [0, 1] : scaleOf('auto');
		hs.forEach(function (h) {
			hd = SEQS[st.seq].heads[h];
			n = NQ * NKV;
			for (k = 0; k < n; k++) {
				v = values(hd)[k];
				if (isFinite(v) && !blocked(hd, k)) {
					if (v < lo)
						lo = v;
					if (v > hi)
						hi = v;
				}
			}
		});
		if (lo > hi)
			return [0, 0];
		return [lo, hi];
	}
	function position(sc, v) {
		var t;

		if (!(sc[1] > sc[0]))
			return 0.5;
		t = (v - sc[0]) / (sc[1] - sc[0]);
		return t < 0 ? 0 : t > 1 ? 1 : t;
	}

	/* ---- painters: one drawing for the screen's canvas, the PNG and the SVG ---- */

	function canvasPainter(ctx) {
		return {
			rect: function (x, y, w, h, fill) { ctx.fillStyle = fill; ctx.fillRect(x, y, w, h); },
			line: function (x1, y1, x2, y2, color, width, alpha) {
				ctx.globalAlpha = alpha;
				ctx.strokeStyle = color;
				ctx.lineWidth = width;
				ctx.beginPath();
				ctx.moveTo(x1, y1);
				ctx.lineTo(x2, y2);
				ctx.stroke();
				ctx.globalAlpha = 1;
			},
			text: function (x, y, s, size, anchor, rotate, color) {
				ctx.save();
				ctx.fillStyle = color || '#222';
				ctx.font = size + 'px sans-serif';
				ctx.textAlign = anchor;
				ctx.textBaseline = 'middle';
				ctx.translate(x, y);
				if (rotate)
					ctx.rotate(-Math.PI / 2);
				ctx.fillText(s, 0, 0);
				ctx.restore();
			}
		};
	}
	function svgPainter(root) {
		function add(tag, attrs) {
			var e = document.createElementNS(SVGNS, tag), k;

			for (k in attrs)
				e.setAttribute(k, attrs[k]);
			root.appendChild(e);
			return e;
		}
		return {
			rect: function (x, y, w, h, fill) { add('rect', { x: x, y: y, width: w, height: h, fill: fill }); },
			line: function (x1, y1, x2, y2, color, width, alpha) {
				add('line', { x1: x1, y1: y1, x2: x2, y2: y2, stroke: color, 'stroke-width': width,
					      'stroke-opacity': alpha });
			},
			text: function (x, y, s, size, anchor, rotate, color) {
				var e = add('text', { x: 0, y: 0, 'font-size': size, 'font-family': 'sans-serif',
						      'text-anchor': anchor === 'right' ? 'end' : anchor === 'center' ? 'middle' : 'start',
						      'dominant-baseline': 'middle', fill: color || '#222',
						      transform: 'translate(' + x + ' ' + y + ')' + (rotate ? ' rotate(-90)' : '') });

				e.textContent = s;
			}
		};
	}

	/* a panel's cells from (x0, y0), cell px each */
	function paintCells(p, hd, sc, x0, y0, cell) {
		var i, j, k, v, c, vals = values(hd), txt = cell >= 30;

		for (i = 0; i < NQ; i++)
			for (j = 0; j < NKV; j++) {
				k = i * NKV + j;
				v = vals[k];
				if (blocked(hd, k)) {
					p.rect(x0 + j * cell, y0 + i * cell, cell, cell, '#e4e4e4');
					p.line(x0 + j * cell + 1, y0 + (i + 1) * cell - 1, x0 + (j + 1) * cell - 1,
					       y0 + i * cell + 1, '#9a9a9a', 1, 1);
					continue;
				}
				c = rgb(position(sc, v));
				p.rect(x0 + j * cell, y0 + i * cell, cell, cell, css(c));
				if (txt)
					p.text(x0 + (j + 0.5) * cell, y0 + (i + 0.5) * cell, fmt(v, 2), Math.min(11, cell / 3),
					       'center', false, c[0] * 0.299 + c[1] * 0.587 + c[2] * 0.114 > 140 ? '#111' : '#fff');
			}
	}

	function cut(s, n) { return s.length > n ? s.slice(0, n - 1) + '…' : s; }

	/* the whole view, for saving: panels side by side, labels and the legend */
	function paintView(p, measure) {
		var cell = st.cell, hs = shownHeads(), sc = scale(), font = Math.max(8, Math.min(12, cell - 2)),
		    qw = 0, kw = 0, i, x = 10, y0, w = 0, h = 0, panelW, rowH, hd, title;

		for (i = 0; i < NQ; i++)
			qw = Math.max(qw, cut(axisText(QL, i), 16).length);
		for (i = 0; i < NKV; i++)
			kw = Math.max(kw, cut(axisText(KL, i), 16).length);
		qw = qw * font * 0.62 + 8;
		kw = kw * font * 0.62 + 8;
		y0 = 30;
		hs.forEach(function (hh) {
			hd = SEQS[st.seq].heads[hh];
			title = headTitle(hh);
			if (st.view === 'heatmap') {
				panelW = qw + NKV * cell;
				if (p) {
					p.text(x, y0, title, 13, 'left', false);
					for (i = 0; i < NKV; i++)
						p.text(x + qw + (i + 0.5) * cell, y0 + 12 + kw, cut(axisText(KL, i), 16), font, 'left', true);
					for (i = 0; i < NQ; i++)
						p.text(x + qw - 4, y0 + 16 + kw + (i + 0.5) * cell, cut(axisText(QL, i), 16), font, 'right', false);
					paintCells(p, hd, sc, x + qw, y0 + 16 + kw, cell);
				}
				h = Math.max(h, y0 + 16 + kw + NQ * cell + 10);
			} else {
				rowH = Math.max(14, cell);
				panelW = qw + 160 + kw;
				if (p) {
					p.text(x, y0, title, 13, 'left', false);
					paintLines(p, hd, x + qw, y0 + 16, 160, rowH, -1);
					for (i = 0; i < NQ; i++)
						p.text(x + qw - 4, y0 + 16 + (i + 0.5) * rowH, cut(axisText(QL, i), 16), font, 'right', false);
					for (i = 0; i < NKV; i++)
						p.text(x + qw + 164, y0 + 16 + (i + 0.5) * rowH, cut(axisText(KL, i), 16), font, 'left', false);
				}
				h = Math.max(h, y0 + 16 + Math.max(NQ, NKV) * rowH + 10);
			}
			x += panelW + 24;
		});
		w = Math.max(x, 340);
		if (p) {
			p.text(10, 12, 'mha: ' + stepWords() + (SEQS[st.seq].title ? ', ' + SEQS[st.seq].title : ''), 13, 'left', false);
			paintLegend(p, 10, h + 4, sc);
		}
		if (measure)
			return [Math.ceil(w), Math.ceil(h + 44)];
	}

	function paintLegend(p, x, y, sc) {
		var i, n = 64, t, W = 240, ticks = st.view === 'tokens' ? [0, 1] : [sc[0], sc[1]];

		if (st.view === 'tokens') {
			p.text(x, y + 10, 'line opacity and width: softmax weight, 0 to 1', 11, 'left', false);
			return;
		}
		for (i = 0; i < n; i++)
			p.rect(x + i * W / n, y, W / n + 0.5, 12, css(rgb(i / (n - 1))));
		for (i = 0; i <= 4; i++) {
			t = ticks[0] + (ticks[1] - ticks[0]) * i / 4;
			p.rect(x + i * W / 4 - 0.5, y + 12, 1, 4, '#333');
			p.text(x + i * W / 4, y + 24, fmt(t, 3), 10, 'center', false);
		}
		p.rect(x + W + 14, y, 12, 12, '#e4e4e4');
		p.text(x + W + 30, y + 6, 'masked', 10, 'left', false);
	}

	/* token lines: query i at the left (x0), key j at the right (x0 + gap); sel: one query or -1 */
	function paintLines(p, hd, x0, y0, gap, rowH, sel) {
		var i, j, wv;

		for (i = 0; i < NQ; i++) {
			if (sel >= 0 && i !== sel)
				continue;
			for (j = 0; j < NKV; j++) {
				wv = hd.softmax[i * NKV + j];
				if (!(wv > 0.002))
					continue;
				p.line(x0, y0 + (i + 0.5) * rowH, x0 + gap, y0 + (j + 0.5) * rowH, sel >= 0 ? '#d0008f' : '#1f5fa8',
				       0.5 + 4 * wv, Math.min(1, 0.08 + wv));
			}
		}
	}

	/* ---- the screen ---- */

	var tip = document.getElementById('tip'), tipHead = document.getElementById('tip-head'),
	    tipText = document.getElementById('tip-text');

	function stepWords() { return st.step === 'softmax' ? 'softmax (the attention weights)' : st.step; }
	function headTitle(h) {
		var hd = SEQS[st.seq].heads[h];

		return 'head ' + (h + 1) + (D.kv_heads !== D.heads ? ' (key/value head ' + (hd.kv_head + 1) + ')' : '');
	}
	function showTip(h, i, j, x, y) {
		var hd = SEQS[st.seq].heads[h], k = i * NKV + j, v = values(hd)[k],
		    what = st.view === 'tokens' ? 'softmax' : st.step, val = hd[what][k];

		tipHead.textContent = 'head ' + (h + 1) + ', query ' + label(QL, i) + ', key ' + label(KL, j) + ': ' +
			what + ' = ' + g(val) + (blocked(hd, k) && what === st.step && v === v ? ' (masked)' : '');
		tipText.textContent = narrate(st.seq, h, i, j).join('\n');
		tip.hidden = false;
		tip.style.left = Math.max(4, Math.min(x + 16, window.innerWidth - tip.offsetWidth - 8)) + 'px';
		tip.style.top = Math.max(4, Math.min(y + 16, window.innerHeight - tip.offsetHeight - 8)) + 'px';
	}
	function hideTip() { tip.hidden = true; }

	function heatPanel(h, sc) {
		var cell = st.cell;
		/* small cells: every label stays in the page (a hover title, a screen
		 * reader), every k-th is shown, overflowing its cell */
		var thin = cell < 9 ? Math.ceil(11 / cell) : 1;
		var hd = SEQS[st.seq].heads[h], font = Math.max(9, Math.min(12, cell - 2)) + 'px',
		    sec = el('section', 'panel'), grid = el('div', 'grid'), cols = el('div', 'cols'),
		    rows = el('div', 'rows'), box = el('div', 'cellbox'), cv = document.createElement('canvas'),
		    cur = el('div', 'cursor'), scroll = el('div', 'scroll'), i, lab, ratio = window.devicePixelRatio || 1,
		    pos = { i: 0, j: 0 };

		sec.setAttribute('data-head', String(h + 1));
		sec.setAttribute('aria-label', headTitle(h));
		sec.appendChild(el('h2', null, headTitle(h) + ': ' + stepWords()));
		sec.appendChild(el('div', 'axis', 'rows: queries, columns: keys'));
		grid.style.gridTemplateColumns = 'auto ' + (NKV * cell) + 'px';
		grid.appendChild(el('div'));
		for (i = 0; i < NKV; i++) {
			lab = el('span', 'lab', axisText(KL, i));
			lab.style.width = cell + 'px';
			lab.style.fontSize = font;
			lab.style.lineHeight = cell + 'px';
			lab.title = 'key ' + label(KL, i);
			if (thin > 1)
				lab.className = i % thin ? 'lab hidden' : 'lab over';
			cols.appendChild(lab);
		}
		grid.appendChild(cols);
		for (i = 0; i < NQ; i++) {
			lab = el('span', 'lab', axisText(QL, i));
			lab.style.height = cell + 'px';
			lab.style.fontSize = font;
			lab.style.lineHeight = cell + 'px';
			lab.title = 'query ' + label(QL, i);
			if (thin > 1)
				lab.className = i % thin ? 'lab hidden' : 'lab over';
			rows.appendChild(lab);
		}
		grid.appendChild(rows);
		cv.width = Math.round(NKV * cell * ratio);
		cv.height = Math.round(NQ * cell * ratio);
		cv.style.width = NKV * cell + 'px';
		cv.style.height = NQ * cell + 'px';
		cv.tabIndex = 0;
		cv.setAttribute('role', 'img');
		cv.setAttribute('aria-label', headTitle(h) + ', ' + st.step + ': ' + NQ + ' queries by ' + NKV +
				' keys; arrow keys move between cells');
		(function () {
			var ctx = cv.getContext('2d');

			ctx.scale(ratio, ratio);
			paintCells(canvasPainter(ctx), hd, sc, 0, 0, cell);
		})();
		cur.hidden = true;
		box.appendChild(cv);
		box.appendChild(cur);
		grid.appendChild(box);
		scroll.appendChild(grid);
		sec.appendChild(scroll);

		function put(i2, j2, fromMouse, ev) {
			var r;

			pos.i = Math.max(0, Math.min(NQ - 1, i2));
			pos.j = Math.max(0, Math.min(NKV - 1, j2));
			cur.hidden = false;
			cur.style.left = pos.j * cell + 'px';
			cur.style.top = pos.i * cell + 'px';
			cur.style.width = cell + 'px';
			cur.style.height = cell + 'px';
			r = cv.getBoundingClientRect();
			if (fromMouse)
				showTip(h, pos.i, pos.j, ev.clientX, ev.clientY);
			else
				showTip(h, pos.i, pos.j, r.left + (pos.j + 1) * cell, r.top + (pos.i + 1) * cell);
		}
		cv.addEventListener('mousemove', function (ev) {
			var r = cv.getBoundingClientRect();

			put(Math.floor((ev.clientY - r.top) / cell), Math.floor((ev.clientX - r.left) / cell), true, ev);
		});
		cv.addEventListener('mouseleave', function () {
			if (document.activeElement !== cv) {
				cur.hidden = true;
				hideTip();
			}
		});
		cv.addEventListener('focus', function () { put(pos.i, pos.j, false); });
		cv.addEventListener('blur', function () { cur.hidden = true; hideTip(); });
		cv.addEventListener('keydown', function (ev) {
			var di = 0, dj = 0, page = Math.max(1, Math.floor(300 / cell));

			switch (ev.key) {
			case 'ArrowUp': di = -1; break;
			case 'ArrowDown': di = 1; break;
			case 'ArrowLeft': dj = -1; break;
			case 'ArrowRight': dj = 1; break;
			case 'PageUp': di = -page; break;
			case 'PageDown': di = page; break;
			case 'Home': dj = -NKV; break;
			case 'End': dj = NKV; break;
			case 'Escape': hideTip(); return;
			default: return;
			}
			ev.preventDefault();
			put(pos.i + di, pos.j + dj, false);
			cur.scrollIntoView({ block: 'nearest', inline: 'nearest' });
		});
		return sec;
	}

	function tokenPanel(h) {
		var hd = SEQS[st.seq].heads[h], rowH = Math.max(14, st.cell), gap = 160,
		    sec = el('section', 'panel'), wrap = el('div', 'tokens'), qcol = el('div', 'tokcol q'),
		    kcol = el('div', 'tokcol k'), cv = document.createElement('canvas'), scroll = el('div', 'scroll'),
		    ratio = window.devicePixelRatio || 1, H = Math.max(NQ, NKV) * rowH, qs = [], ks = [], i,
		    sel = -1, font = Math.max(9, Math.min(13, rowH - 3)) + 'px';

		sec.setAttribute('data-head', String(h + 1));
		sec.setAttribute('aria-label', headTitle(h));
		sec.appendChild(el('h2', null, headTitle(h) + ': lines from each query to its keys'));
		sec.appendChild(el('div', 'axis', 'left: queries, right: keys; a line is as strong as the softmax weight'));
		function tok(labels, i2, col, list, who) {
			var b = el('button', 'tok', axisText(labels, i2));

			b.type = 'button';
			b.style.height = rowH + 'px';
			b.style.lineHeight = rowH + 'px';
			b.style.fontSize = font;
			b.title = who + ' ' + label(labels, i2);
			col.appendChild(b);
			list.push(b);
			return b;
		}
		function draw() {
			var ctx = cv.getContext('2d');

			ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
			ctx.clearRect(0, 0, gap, H);
			paintLines(canvasPainter(ctx), hd, 0, 0, gap, rowH, sel);
			qs.forEach(function (b, k) { b.classList.toggle('on', k === sel); });
		}
		function choose(i2) { sel = i2; draw(); }
		function near(j2, ev, b) {
			var r = b.getBoundingClientRect();

			if (sel < 0)
				return;
			ks.forEach(function (kb, k) { kb.classList.toggle('on', k === j2); });
			showTip(h, sel, j2, ev ? ev.clientX : r.right, ev ? ev.clientY : r.bottom);
		}
		for (i = 0; i < NQ; i++)
			(function (i2) {
				var b = tok(QL, i2, qcol, qs, 'query');

				/* one tab stop per panel: the arrows move between its queries */
				b.tabIndex = i2 ? -1 : 0;
				b.addEventListener('mouseenter', function () { choose(i2); });
				b.addEventListener('focus', function () {
					qs.forEach(function (o, k) { o.tabIndex = k === i2 ? 0 : -1; });
					choose(i2);
				});
				b.addEventListener('keydown', function (ev) {
					var best = 0, k;

					if (ev.key === 'ArrowDown' || ev.key === 'ArrowUp') {
						ev.preventDefault();
						qs[Math.max(0, Math.min(NQ - 1, i2 + (ev.key === 'ArrowDown' ? 1 : -1)))].focus();
					} else if (ev.key === 'ArrowRight') {
						ev.preventDefault();
						for (k = 1; k < NKV; k++)
							if (hd.softmax[i2 * NKV + k] > hd.softmax[i2 * NKV + best])
								best = k;
						ks[best].focus();
					} else if (ev.key === 'Escape') {
						hideTip();
					}
				});
			})(i);
		for (i = 0; i < NKV; i++)
			(function (j2) {
				var b = tok(KL, j2, kcol, ks, 'key');

				b.tabIndex = -1;
				b.addEventListener('mouseenter', function (ev) { near(j2, ev, b); });
				b.addEventListener('focus', function () { near(j2, null, b); });
				b.addEventListener('blur', hideTip);
				b.addEventListener('keydown', function (ev) {
					if (ev.key === 'ArrowDown' || ev.key === 'ArrowUp') {
						ev.preventDefault();
						ks[Math.max(0, Math.min(NKV - 1, j2 + (ev.key === 'ArrowDown' ? 1 : -1)))].focus();
					} else if (ev.key === 'ArrowLeft') {
						ev.preventDefault();
						qs[Math.max(0, sel)].focus();
					} else if (ev.key === 'Escape') {
						hideTip();
					}
				});
			})(i);
		cv.width = Math.round(gap * ratio);
		cv.height = Math.round(H * ratio);
		cv.style.width = gap + 'px';
		cv.style.height = H + 'px';
		cv.setAttribute('role', 'img');
		cv.setAttribute('aria-label', 'lines from queries to keys, ' + headTitle(h));
		cv.addEventListener('mousemove', function (ev) {
			/* the nearest line of the chosen query (all queries when none), within 5 px */
			var r = cv.getBoundingClientRect(), x = ev.clientX - r.left, y = ev.clientY - r.top,
			    best = 5, bi = -1, bj = -1, a, jj, x1 = 0, x2 = gap, y1, y2, d, t, px, py;

			for (a = 0; a < NQ; a++) {
				if (sel >= 0 && a !== sel)
					continue;
				for (jj = 0; jj < NKV; jj++) {
					if (!(hd.softmax[a * NKV + jj] > 0.002))
						continue;
					y1 = (a + 0.5) * rowH;
					y2 = (jj + 0.5) * rowH;
					t = Math.max(0, Math.min(1, ((x - x1) * (x2 - x1) + (y - y1) * (y2 - y1)) /
								 ((x2 - x1) * (x2 - x1) + (y2 - y1) * (y2 - y1))));
					px = x1 + t * (x2 - x1);
					py = y1 + t * (y2 - y1);
					d = Math.sqrt((x - px) * (x - px) + (y - py) * (y - py));
					if (d < best) {
						best = d;
						bi = a;
						bj = jj;
					}
				}
			}
			if (bi >= 0)
				showTip(h, bi, bj, ev.clientX, ev.clientY);
			else
				hideTip();
		});
		cv.addEventListener('mouseleave', hideTip);
		wrap.appendChild(qcol);
		wrap.appendChild(cv);
		wrap.appendChild(kcol);
		scroll.appendChild(wrap);
		sec.appendChild(scroll);
		draw();
		return sec;
	}

	function legend(sc) {
		var svg = document.getElementById('legend-svg');

		while (svg.firstChild)
			svg.removeChild(svg.firstChild);
		paintLegend(svgPainter(svg), 22, 2, sc);
	}

	function render() {
		var main = document.getElementById('panels'), sc = scale();

		hideTip();
		while (main.firstChild)
			main.removeChild(main.firstChild);
		shownHeads().forEach(function (h) {
			main.appendChild(st.view === 'heatmap' ? heatPanel(h, sc) : tokenPanel(h));
		});
		legend(sc);
		document.getElementById('step').disabled = st.view === 'tokens';
		document.getElementById('range').disabled = st.view === 'tokens';
	}

	/* ---- saving the view ---- */

	function download(blob, name) {
		var a = document.createElement('a'), u = URL.createObjectURL(blob);

		a.download = name;
		a.href = u;
		document.body.appendChild(a);
		a.click();
		document.body.removeChild(a);
		setTimeout(function () { URL.revokeObjectURL(u); }, 1000);
	}
	function fileName(ext) {
		return 'attention-' + st.view + '-' + (st.view === 'heatmap' ? st.step + '-' : '') +
			(st.head === 'all' ? 'all' : 'head' + (Number(st.head) + 1)) + '.' + ext;
	}
	function viewSvg() {
		var size = paintView(null, true), svg = document.createElementNS(SVGNS, 'svg');

		svg.setAttribute('width', size[0]);
		svg.setAttribute('height', size[1]);
		svg.setAttribute('viewBox', '0 0 ' + size[0] + ' ' + size[1]);
		svgPainter(svg).rect(0, 0, size[0], size[1], '#fff');
		paintView(svgPainter(svg));
		return new XMLSerializer().serializeToString(svg);
	}
	function viewPng(done) {
		var size = paintView(null, true), cv = document.createElement('canvas'), ctx, k = 2;

		/* keep the picture within what a canvas can hold */
		while (k > 0.25 && size[0] * size[1] * k * k > 6e7)
			k /= 2;
		cv.width = Math.ceil(size[0] * k);
		cv.height = Math.ceil(size[1] * k);
		ctx = cv.getContext('2d');
		ctx.scale(k, k);
		ctx.fillStyle = '#fff';
		ctx.fillRect(0, 0, size[0], size[1]);
		paintView(canvasPainter(ctx));
		cv.toBlob(done, 'image/png');
	}
	/* for tests: the saved views' bytes, without a download */
	window.mhaPage = { svg: viewSvg, png: viewPng, narrate: narrate, fmt: fmt, state: st, seqs: SEQS,
			   render: render };

	/* ---- controls ---- */

	function options(sel, list) {
		list.forEach(function (o) {
			var e = el('option', null, o[1]);

			e.value = o[0];
			sel.appendChild(e);
		});
	}
	function summary() {
		var how = SEQS[st.seq].mask_how;

		document.getElementById('summary').textContent = NQ + (NQ === 1 ? ' query, ' : ' queries, ') + NKV +
			(NKV === 1 ? ' key, ' : ' keys, ') + D.heads + (D.heads === 1 ? ' head' : ' heads') +
			(D.kv_heads !== D.heads ? ' sharing ' + D.kv_heads + ' key/value head' + (D.kv_heads === 1 ? '' : 's') : '') +
			' of d_k = ' + DK + ', d_v = ' + DV + '; scaled by ' + D.scale_how +
			(how !== null ? '; mask: ' + how : '') + (CAP > 0 ? '; softcap ' + g(CAP) : '') + '.';
	}
	function setup() {
		var seq = document.getElementById('sequence'), step = document.getElementById('step'),
		    head = document.getElementById('head'), view = document.getElementById('view'),
		    range = document.getElementById('range'), zoom = document.getElementById('zoom'), h, list = [],
		    n = Math.max(NQ, NKV), note = document.getElementById('note');

		summary();
		if (D.f32) {
			note.textContent = '--dtype f32 keeps no intermediates: this page shows the float64 steps of the same run.';
			note.hidden = false;
		}
		if (SEQS.length > 1) {
			SEQS.forEach(function (s, b) { list.push([String(b), s.title]); });
			options(seq, list);
			document.getElementById('sequence-box').hidden = false;
			seq.addEventListener('change', function () { st.seq = Number(seq.value); summary(); render(); });
		}
		options(step, STEPS.map(function (s) { return [s, s]; }));
		step.value = st.step;
		step.addEventListener('change', function () { st.step = step.value; render(); });
		list = D.heads > 1 ? [['all', 'all heads, side by side']] : [];
		for (h = 0; h < D.heads; h++)
			list.push([String(h), 'head ' + (h + 1)]);
		options(head, list);
		head.value = st.head;
		head.addEventListener('change', function () { st.head = head.value; fit(); render(); });
		view.addEventListener('change', function () { st.view = view.value; render(); });
		list = [['default', 'default (softmax 0 to 1)'], ['auto', 'auto (the values shown)'],
			['unit', '0 to 1']];
		if (D.range && D.range !== 'auto')
			list.push(['given', g(num(D.range[0])) + ' to ' + g(num(D.range[1])) + ' (--range)']);
		options(range, list);
		st.range = D.range === 'auto' ? 'auto' : D.range ? 'given' : 'default';
		range.value = st.range;
		range.addEventListener('change', function () { st.range = range.value; render(); });
		function fit() {
			var per = st.head === 'all' && D.heads > 1 ?
				Math.max(160, Math.min(420, (window.innerWidth - 80) / Math.min(D.heads, 3) - 140)) :
				Math.max(560, Math.min(1000, window.innerWidth - 260));

			st.cell = Math.max(3, Math.min(40, Math.floor(per / n)));
			zoom.value = st.cell;
		}
		fit();
		zoom.addEventListener('input', function () { st.cell = Number(zoom.value); render(); });
		document.getElementById('save-svg').addEventListener('click', function () {
			download(new Blob([viewSvg()], { type: 'image/svg+xml' }), fileName('svg'));
		});
		document.getElementById('save-png').addEventListener('click', function () {
			viewPng(function (b) { if (b) download(b, fileName('png')); });
		});
		document.addEventListener('keydown', function (ev) { if (ev.key === 'Escape') hideTip(); });
		render();
	}
	setup();
})();
