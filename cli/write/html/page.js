/*
 * page.js: mha's interactive page (cli/html.c writes it with the run's data).
 *
 * Reads the data from the JSON script element, draws every head's step as a
 * heatmap (canvas cells, DOM labels) or as BertViz-like token lines, and
 * narrates a cell on hover or keyboard focus exactly as 'mha forward
 * --explain --cell' prints it (cli/explain.c's work_cell, line for line,
 * numbers as C's %.*g).  Text from the data only ever goes in through
 * textContent.  No network: nothing is loaded, saving makes a Blob.
 *
 * An overview (--pool, D.pool) holds each drawn step in blocks of cells
 * instead: its values are the blocks' (the largest, or the mean, of the
 * cells the mask lets through), a block's words give its queries and keys,
 * its value and, for max, the cell that holds it.
 */
(function () {
	'use strict';

	var D = JSON.parse(document.getElementById('mha-data').textContent);
	/* the SVG namespace, from the page's own inline <svg> */
	var SVGNS = document.getElementById('legend-svg').namespaceURI;
	var MAX_TERMS = D.terms; /* explain.h's: the terms of a sum written out */
	var MAX_SUM_TERMS = D.sum_terms; /* the terms of a softmax sum shown */
	/* queries and keys drawn: cells, or the overview's blocks */
	var NQ = D.n_q, NKV = D.n_kv, DK = D.d_k, DV = D.d_v;
	/* the columns of each row of K and V the page holds: those the narrative reads */
	var KC = D.k_cols, VC = D.v_cols;
	/* --rows, --cols: the first query and key the page holds, numbered as the run numbers them */
	var R0 = D.first_row || 0, C0 = D.first_col || 0;
	var QL = D.tokens, KL = D.kv_tokens;
	var POOL = D.pool;

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
	function u32(s) {
		var bin = atob(s), n = bin.length / 4, out = new Uint32Array(n), i, b;

		for (i = 0; i < n; i++) {
			b = 4 * i;
			out[i] = (bin.charCodeAt(b) | bin.charCodeAt(b + 1) << 8 | bin.charCodeAt(b + 2) << 16) +
				bin.charCodeAt(b + 3) * 16777216;
		}
		return out;
	}
	/* an overview's head: each step's block values, where their largest cells lie
	 * (max), and how many cells of each block the mask blocks */
	function pooledHead(h) {
		var x = { kv_head: h.kv_head, at: {}, mask: null, blocked: h.blocked ? u32(h.blocked) : null }, name;

		for (name in h.steps) {
			x[name] = f64(h.steps[name].value);
			if (h.steps[name].at)
				x.at[name] = u32(h.steps[name].at);
		}
		return x;
	}

	var SCALE = num(D.scale), CAP = num(D.softcap);
	var SEQS = D.sequences.map(function (s) {
		/* a mask the heads share comes once */
		var shared = s.mask ? f64(s.mask) : null;

		return { title: s.title, offset: s.offset, mask_how: s.mask_how, heads: s.heads.map(function (h) {
			if (POOL)
				return pooledHead(h);
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

	function label(labels, i, r0) {
		r0 = r0 || 0;
		return labels ? (i + 1 + r0) + ' (' + labels[i] + ')' : String(i + 1 + r0);
	}
	/* an overview's block i of an axis n long, numbered from first + 1: "1001-1032" */
	function span(i, n, first) {
		var a = first + i * POOL.k + 1, b = first + Math.min((i + 1) * POOL.k, n);

		return a === b ? String(a) : a + '-' + b;
	}
	/* a query's or key's words, "5 (cat)", or a block's, "1-32 (the–cat)" */
	function qLabel(i) { return POOL ? span(i, POOL.n_q, R0) + (QL ? ' (' + QL[i] + ')' : '') : label(QL, i, R0); }
	function kLabel(j) { return POOL ? span(j, POOL.n_kv, C0) + (KL ? ' (' + KL[j] + ')' : '') : label(KL, j, C0); }
	/* on an axis: the token, else the number */
	function qText(i) { return QL ? QL[i] : POOL ? span(i, POOL.n_q, R0) : String(i + 1 + R0); }
	function kText(j) { return KL ? KL[j] : POOL ? span(j, POOL.n_kv, C0) : String(j + 1 + C0); }
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

		L.push('  Query ' + label(QL, i, R0) + ' and key ' + label(KL, j) + ', head ' + (h + 1) + ', by hand:');
		if (D.mla) {
			/* latent attention: the score as its content part plus its position part */
			a = 0;
			b = 0;
			for (t = 0; t < DK; t++)
				if (t < DK - D.mla)
					a += hd.q[i * DK + t] * hd.k[j * KC + t];
				else
					b += hd.q[i * DK + t] * hd.k[j * KC + t];
			L.push('    q' + (i + 1 + R0) + ' = [q_nope, q_pe_rot] and k' + (j + 1) + ' = [k_nope, k_pe_rot] of head ' + (h + 1) + ':');
			L.push('      q_nope . k_nope = ' + g(a) + ' (content: features 1 to ' + (DK - D.mla) + '), q_pe_rot . k_pe_rot = ' + g(b) + ' (position: features ' + (DK - D.mla + 1) + ' to ' + DK + ')');
		} else {
			if (D.norm)
				L.push('    (q and k normalised first, q_norm and k_norm: --explain shows the norm)');
			if (D.rope)
				L.push('    (q and k after the rotary embedding: --explain --cell shows the rotation)');
		}
		line = '    score   = q' + (i + 1 + R0) + ' . k' + (j + 1) + ' =';
		for (t = 0; t < DK; t++) {
			if (t === MAX_TERMS && DK > MAX_TERMS + 1) {
				line += ' + … (' + DK + ' terms in all)';
				break;
			}
			line += (t ? ' +' : '') + ' ' + factor(hd.q[i * DK + t]) + '*' + factor(hd.k[j * KC + t]);
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
				L.push('    mask    = -inf: query ' + (i + 1 + R0) + ' may not see key ' + (j + 1) + ', so masked = -inf');
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
			L.push('    softmax: every key is masked for query ' + (i + 1 + R0) + ': its weights are all 0, and so is its output row');
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
			L.push('    softmax: the ' + largest + ' in row ' + (i + 1 + R0) + ' is ' + a + ' and the sink is ' + b + ', so m = ' + g(mx) + ';');
			sum = Math.exp(sk - mx);
			line = '      sum = exp(sink - m) + ';
			terms = 1 + NKV;
		} else {
			L.push('    softmax: the ' + largest + ' in row ' + (i + 1 + R0) + ' is m = ' + g(mx) + ';');
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
			L.push('      weight ' + (i + 1 + R0) + ',' + (j + 1) + ' = 0 (masked)');
			return L;
		}
		c = g(w[r0 + j]);
		L.push('      weight ' + (i + 1 + R0) + ',' + (j + 1) + ' = exp(' + g(row[r0 + j]) + ' - m) / sum = ' +
		       g(Math.exp(row[r0 + j] - mx)) + ' / ' + b + ' = ' + c);
		vals = [];
		prods = [];
		for (t = 0; t < DV && t < MAX_TERMS; t++) {
			vals.push(g(hd.v[j * VC + t]));
			prods.push(g(w[r0 + j] * hd.v[j * VC + t]));
		}
		L.push("    output: row " + (i + 1 + R0) + " of the head's output is the weighted sum of V" + (hd.kv_head + 1) +
		       "'s rows; key " + (j + 1) + ' adds ' + c + ' * [' + vals.join(', ') + (DV > MAX_TERMS ? ', …' : '') +
		       '] = [' + prods.join(', ') + (DV > MAX_TERMS ? ', …' : '') + ']');
		return L;
	}

	/* an overview's block k: its queries and keys */
	function blockSize(k) {
		var i = Math.floor(k / NKV), j = k % NKV;

		return [Math.min(POOL.k, POOL.n_q - i * POOL.k), Math.min(POOL.k, POOL.n_kv - j * POOL.k)];
	}

	/* The overview's block (i, j) of head h: what it holds, and where to look closer. */
	function poolNarrate(s, h, i, j) {
		var hd = SEQS[s].heads[h], k = i * NKV + j, L = [], sz = blockSize(k), n = sz[0] * sz[1],
		    past = st.step === 'masked' || st.step === 'softmax', b = past && hd.blocked ? hd.blocked[k] : 0,
		    v = values(hd)[k], at, qi, kj, q0 = R0 + i * POOL.k + 1, k0 = C0 + j * POOL.k + 1,
		    cells = (n - b) + (n - b === 1 ? ' cell' : ' cells') + (b ? ' the mask lets through' : ''),
		    seq = SEQS.length > 1 ? ' --sequence ' + (s + 1) : '';

		L.push('  Queries ' + qLabel(i) + ' and keys ' + kLabel(j) + ', head ' + (h + 1) + ':');
		L.push('    a block of ' + sz[0] + ' by ' + sz[1] + ' cells' + (b ? ', ' + b + ' of them masked' : ''));
		if (b === n) {
			L.push('    every cell is masked: the block has no value');
			return L;
		}
		if (POOL.rule === 'max') {
			at = hd.at[st.step][k];
			qi = q0 + Math.floor(at / POOL.k);
			kj = k0 + at % POOL.k;
			L.push('    the largest ' + st.step + ' of its ' + cells + ' = ' + g(v) + ', at query ' + qi + ', key ' + kj);
			L.push('    that cell worked by hand: the same run with' + seq + ' --cell ' + qi + ',' + kj + ' in place of --pool and -o');
		} else {
			L.push('    the mean ' + st.step + ' of its ' + cells + ' = ' + g(v));
			L.push('    its cells one by one: this run with' + seq + ' --rows ' + q0 + ':' + (q0 + sz[0] - 1) +
			       ' --cols ' + k0 + ':' + (k0 + sz[1] - 1) + ' --format text');
		}
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
		var past = st.step === 'masked' || st.step === 'softmax', sz;

		if (POOL) {
			sz = blockSize(k);
			return (past && hd.blocked && hd.blocked[k] === sz[0] * sz[1]) || values(hd)[k] === -Infinity;
		}
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
			qw = Math.max(qw, cut(qText(i), 16).length);
		for (i = 0; i < NKV; i++)
			kw = Math.max(kw, cut(kText(i), 16).length);
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
						p.text(x + qw + (i + 0.5) * cell, y0 + 12 + kw, cut(kText(i), 16), font, 'left', true);
					for (i = 0; i < NQ; i++)
						p.text(x + qw - 4, y0 + 16 + kw + (i + 0.5) * cell, cut(qText(i), 16), font, 'right', false);
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
						p.text(x + qw - 4, y0 + 16 + (i + 0.5) * rowH, cut(qText(i), 16), font, 'right', false);
					for (i = 0; i < NKV; i++)
						p.text(x + qw + 164, y0 + 16 + (i + 0.5) * rowH, cut(kText(i), 16), font, 'left', false);
				}
				h = Math.max(h, y0 + 16 + Math.max(NQ, NKV) * rowH + 10);
			}
			x += panelW + 24;
		});
		w = Math.max(x, POOL ? 560 : 340);
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
		if (POOL)
			p.text(x + W + 80, y + 6, 'a cell: the ' + (POOL.rule === 'max' ? 'largest' : 'mean') +
			       ' of a block of ' + POOL.k + '×' + POOL.k, 10, 'left', false);
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

