	/* ---- the screen ---- */

	var tip = document.getElementById('tip'), tipHead = document.getElementById('tip-head'),
	    tipText = document.getElementById('tip-text');

	function stepWords() {
		return (st.step === 'softmax' ? 'softmax (the attention weights)' : st.step) +
			(POOL ? ', ' + POOL.rule + ' of ' + POOL.k + '×' + POOL.k + ' blocks' : '');
	}
	function headTitle(h) {
		var hd = SEQS[st.seq].heads[h];

		return 'head ' + (h + 1) + (D.kv_heads !== D.heads ? ' (key/value head ' + (hd.kv_head + 1) + ')' : '');
	}
	function showTip(h, i, j, x, y) {
		var hd = SEQS[st.seq].heads[h], k = i * NKV + j, v = values(hd)[k],
		    what = st.view === 'tokens' ? 'softmax' : st.step, val = hd[what][k];

		tipHead.textContent = 'head ' + (h + 1) + (POOL ? ', queries ' : ', query ') + qLabel(i) +
			(POOL ? ', keys ' : ', key ') + kLabel(j) + ': ' + (POOL ? POOL.rule + ' of ' : '') + what +
			' = ' + g(val) + (blocked(hd, k) && what === st.step && v === v ? ' (masked)' : '');
		tipText.textContent = (POOL ? poolNarrate : narrate)(st.seq, h, i, j).join('\n');
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
			lab = el('span', 'lab', kText(i));
			lab.style.width = cell + 'px';
			lab.style.fontSize = font;
			lab.style.lineHeight = cell + 'px';
			lab.title = (POOL ? 'keys ' : 'key ') + kLabel(i);
			if (thin > 1)
				lab.className = i % thin ? 'lab hidden' : 'lab over';
			cols.appendChild(lab);
		}
		grid.appendChild(cols);
		for (i = 0; i < NQ; i++) {
			lab = el('span', 'lab', qText(i));
			lab.style.height = cell + 'px';
			lab.style.fontSize = font;
			lab.style.lineHeight = cell + 'px';
			lab.title = (POOL ? 'queries ' : 'query ') + qLabel(i);
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
		function tok(q, i2, col, list, who) {
			var b = el('button', 'tok', q ? qText(i2) : kText(i2));

			b.type = 'button';
			b.style.height = rowH + 'px';
			b.style.lineHeight = rowH + 'px';
			b.style.fontSize = font;
			b.title = who + ' ' + (q ? qLabel(i2) : kLabel(i2));
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
				var b = tok(true, i2, qcol, qs, 'query');

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
				var b = tok(false, j2, kcol, ks, 'key');

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
		svg.setAttribute('width', POOL ? 560 : 340);
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
			(POOL ? POOL.rule + POOL.k + '-' : '') +
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
	window.mhaPage = { svg: viewSvg, png: viewPng, narrate: narrate, poolNarrate: poolNarrate, fmt: fmt,
			   state: st, seqs: SEQS, render: render };

	/* ---- controls ---- */

	function options(sel, list) {
		list.forEach(function (o) {
			var e = el('option', null, o[1]);

			e.value = o[0];
			sel.appendChild(e);
		});
	}
	function summary() {
		var how = SEQS[st.seq].mask_how, nq = POOL ? POOL.n_q : NQ, nkv = POOL ? POOL.n_kv : NKV;

		document.getElementById('summary').textContent = nq + (nq === 1 ? ' query' : ' queries') +
			(R0 ? ' (from query ' + (R0 + 1) + ', --rows)' : '') + ', ' + nkv +
			(nkv === 1 ? ' key' : ' keys') + (C0 ? ' (from key ' + (C0 + 1) + ', --cols)' : '') + ', ' + D.heads + (D.heads === 1 ? ' head' : ' heads') +
			(D.kv_heads !== D.heads ? ' sharing ' + D.kv_heads + ' key/value head' + (D.kv_heads === 1 ? '' : 's') : '') +
			' of d_k = ' + DK + ', d_v = ' + DV + '; scaled by ' + D.scale_how +
			(how !== null ? '; mask: ' + how : '') + (CAP > 0 ? '; softcap ' + g(CAP) : '') + '.' +
			(POOL ? ' An overview (--pool ' + POOL.rule + '): each cell is the ' +
			 (POOL.rule === 'max' ? 'largest' : 'mean') + ' of a block of ' + POOL.k + ' by ' + POOL.k +
			 ' cells, of the cells the mask lets through from the masked step on; ' + NQ + ' by ' + NKV +
			 ' blocks.' : '');
	}
	function setup() {
		var seq = document.getElementById('sequence'), step = document.getElementById('step'),
		    head = document.getElementById('head'), view = document.getElementById('view'),
		    range = document.getElementById('range'), zoom = document.getElementById('zoom'), h, list = [],
		    n = Math.max(NQ, NKV), note = document.getElementById('note');

		summary();
		if (POOL) {
			/* blocks: no lines between tokens, and a block's words, not a cell's sums */
			view.parentNode.hidden = true;
			document.getElementById('help').textContent = 'Hover a block, or tab to a heatmap and move ' +
				'with the arrow keys (Home, End, Page Up and Page Down too): the box gives the block\'s ' +
				'queries and keys and its value' + (POOL.rule === 'max' ? ', the cell that holds it, and ' +
				'the --cell that works that cell by hand' : ', and the --rows and --cols that print its ' +
				'cells') + '.  Escape hides the box.';
		}
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
