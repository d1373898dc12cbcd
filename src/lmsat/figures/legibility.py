"""Legends and labels off the data and the ticks, in every figure: save_figure calls keep_clear,
tests/test_figure_legibility.py checks collisions and sparse log axes on every registered figure.

    keep_clear(fig)          # move each legend and point label that covers something
    assert not collisions(fig), collisions(fig)   # what covers what, by name
    assert not sparse_log_axes(fig)               # every log axis labels two ticks or more

Data are what a plot draws: every vertex of a line and points along its segments (reference
lines such as axhline and axvline too: a label on one hides what it marks), every scatter
marker at its size. Furniture is what names the axes: tick labels, axis labels, titles. A
label is a legend or a text (annotations, notes); no label may cover data, furniture or
another label, and no furniture another.

A legend that covers something moves to the first free place inside its axes
(LEGEND_PLACES), else outside, right of its axes (the next layout pass makes room). A point
label (an annotation offset from its point) moves to the first free offset around the point
that keeps it inside its axes (LABEL_OFFSETS). Only numpy here: the package's modules are
imported at DAG time; the figures passed in bring matplotlib.
"""

from __future__ import annotations

import numpy as np

LEGEND_PLACES = ("upper right", "upper left", "lower left", "lower right", "center right", "center left",
                 "upper center", "lower center", "center")
# (dx, dy, ha, va) in points from the point, nearest first; each scaled by LABEL_RINGS
LABEL_OFFSETS = ((1, 0, "left", "center"), (-1, 0, "right", "center"), (0, 1, "center", "bottom"),
                 (0, -1, "center", "top"), (1, 1, "left", "bottom"), (-1, 1, "right", "bottom"),
                 (1, -1, "left", "top"), (-1, -1, "right", "top"))
LABEL_RINGS = (7, 11, 16, 24)  # points
SEGMENT_STEP_PX = 2.0  # points sampled along a line's segments, this far apart on screen
MAX_PASSES = 4  # a move can change the layout (a legend outside takes room): check again, at most this often


def render(fig):
    """Lay `fig` out and place every artist, without rasterising (draw_without_rendering), and
    return an Agg renderer for text extents: on its canvas, or on a fresh one once the figure
    is closed (save_figure closes it; its artists stay inspectable)."""
    if not hasattr(fig.canvas, "get_renderer"):
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        FigureCanvasAgg(fig)
    fig.draw_without_rendering()
    return fig.canvas.get_renderer()


def movable(fig) -> bool:
    """Whether `fig` has anything keep_clear could move: a legend of an axes or a point label."""
    return any(ax.get_legend() is not None or any(_is_point_label(text) for text in ax.texts) for ax in fig.axes)


def _is_point_label(text) -> bool:
    return type(text).__name__ == "Annotation" and text.anncoords == "offset points"


def _boxes(extents) -> np.ndarray:
    """(n, 4) x0, y0, x1, y1 of matplotlib Bboxes."""
    return np.array([[b.x0, b.y0, b.x1, b.y1] for b in extents], dtype=float).reshape(-1, 4)


def _hits(box: np.ndarray, others: np.ndarray) -> np.ndarray:
    """Which of `others` (n, 4) overlap `box` (4,); touching edges do not."""
    return (others[:, 0] < box[2]) & (box[0] < others[:, 2]) & (others[:, 1] < box[3]) & (box[1] < others[:, 3])


def _clip(start: np.ndarray, end: np.ndarray, frame: np.ndarray) -> tuple[float, float] | None:
    """The part (t0, t1) of the segment start + t (end - start), 0 <= t <= 1, inside `frame`
    (x0, y0, x1, y1); None when it misses it (Liang-Barsky)."""
    t0, t1 = 0.0, 1.0
    delta = end - start
    for p, q in ((-delta[0], start[0] - frame[0]), (delta[0], frame[2] - start[0]),
                 (-delta[1], start[1] - frame[1]), (delta[1], frame[3] - start[1])):
        if p == 0:
            if q < 0:
                return None
            continue
        t = q / p
        if p < 0:
            t0 = max(t0, t)
        else:
            t1 = min(t1, t)
    return (t0, t1) if t0 <= t1 else None


def _along(points: np.ndarray, frame: np.ndarray) -> np.ndarray:
    """(m, 2) points along the polyline `points` (n, 2, display px) inside `frame`,
    SEGMENT_STEP_PX apart; a NaN vertex breaks the line, as matplotlib draws it."""
    out = []
    for start, end in zip(points[:-1], points[1:]):
        if not (np.isfinite(start).all() and np.isfinite(end).all()):
            continue
        part = _clip(start, end, frame)
        if part is None:
            continue
        a, b = start + part[0] * (end - start), start + part[1] * (end - start)
        n = int(np.ceil(np.hypot(*(b - a)) / SEGMENT_STEP_PX))
        out.append(a + np.linspace(0, 1, max(n, 1) + 1)[:, None] * (b - a))
    return np.concatenate(out) if out else np.empty((0, 2))


def data_boxes(fig) -> np.ndarray:
    """(n, 4) display boxes of every data point of `fig`'s visible axes, inside each axes: line
    vertices and points along segments (half a line width, or the marker's size, around each),
    scatter markers drawn in data coordinates (their size)."""
    px = fig.dpi / 72  # pixels per point
    boxes = []
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        frame = ax.get_window_extent()
        inside = np.array([frame.x0 - 1, frame.y0 - 1, frame.x1 + 1, frame.y1 + 1])
        centres_radii = []
        for line in ax.lines:
            if not line.get_visible():
                continue
            xy = line.get_transform().transform(np.asarray(line.get_xydata(), dtype=float))  # (n, 2)
            finite = xy[np.isfinite(xy).all(axis=1)]
            marker = line.get_marker() not in (None, "", " ", "None", "none")
            if marker:
                centres_radii.append((finite, line.get_markersize() / 2 * px))
            if line.get_linestyle() not in ("None", "", " ", "none"):
                centres_radii.append((_along(xy, inside), line.get_linewidth() / 2 * px))
                centres_radii.append((finite, line.get_linewidth() / 2 * px))
        for collection in ax.collections:
            if not collection.get_visible() or collection.get_offset_transform() is not ax.transData:
                continue
            offsets = np.asarray(collection.get_offsets(), dtype=float).reshape(-1, 2)
            if not len(offsets):
                continue
            xy = ax.transData.transform(offsets)  # (n, 2)
            sizes = np.sqrt(np.broadcast_to(np.asarray(collection.get_sizes(), dtype=float), len(offsets))) / 2 * px
            centres_radii.append((xy, sizes))
        for xy, radius in centres_radii:
            if not len(xy):
                continue
            radius = np.broadcast_to(np.maximum(radius, 0.5), len(xy))
            box = np.column_stack([xy[:, 0] - radius, xy[:, 1] - radius, xy[:, 0] + radius, xy[:, 1] + radius])
            keep = (xy[:, 0] >= inside[0]) & (xy[:, 0] <= inside[2]) & (xy[:, 1] >= inside[1]) & (xy[:, 1] <= inside[3])
            boxes.append(box[keep])
    return np.concatenate(boxes) if boxes else np.empty((0, 4))


def tick_labels(axis, renderer):
    """(text, display box) of every tick label `axis` draws: visible, non-empty labels of the
    major and minor ticks inside the view."""
    lo, hi = sorted(axis.get_view_interval())
    slack = 1e-9 * max(abs(lo), abs(hi), 1)
    for ticks, locs in ((axis.get_major_ticks, axis.get_majorticklocs()),
                        (axis.get_minor_ticks, axis.get_minorticklocs())):
        for tick, loc in zip(ticks(len(locs)), locs):
            if lo - slack <= loc <= hi + slack:
                for label in (tick.label1, tick.label2):
                    if label.get_visible() and label.get_text():
                        yield label.get_text(), label.get_window_extent(renderer)


def furniture(fig, renderer) -> list[tuple[str, object]]:
    """(name, display box) of every tick label drawn, axis label and title of the visible axes."""
    found = []
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        for axis in (ax.xaxis, ax.yaxis):
            found += [(f"tick label {text!r}", box) for text, box in tick_labels(axis, renderer)]
            if axis.label.get_visible() and axis.label.get_text():
                found.append((f"axis label {axis.label.get_text()!r}", axis.label.get_window_extent(renderer)))
        titles = [child for child in ax.get_children() if _is_text(child) and child not in ax.texts]
        found += [(f"title {t.get_text()!r}", t.get_window_extent(renderer)) for t in titles
                  if t.get_visible() and t.get_text()]
    return found


def _is_text(artist) -> bool:
    return type(artist).__name__ in ("Text", "Annotation")


def labels(fig, renderer) -> list[tuple[str, object, object]]:
    """(name, artist, display box) of every legend and text (annotations, notes) of `fig`."""
    found = []
    legends = [ax.get_legend() for ax in fig.axes if ax.get_visible() and ax.get_legend() is not None]
    for legend in [*legends, *fig.legends]:
        if legend.get_visible():
            found.append((f"legend {[t.get_text() for t in legend.get_texts()]}", legend,
                          legend.get_window_extent(renderer)))
    texts = [text for ax in fig.axes if ax.get_visible() for text in ax.texts] + list(fig.texts)
    found += [(f"text {t.get_text()!r}", t, t.get_window_extent(renderer)) for t in texts
              if t.get_visible() and t.get_text()]
    return found


def collisions(fig, renderer=None) -> list[str]:
    """What covers what: every label (legend, text) over a data point, a piece of furniture (tick
    label, axis label, title) or another label, and furniture over furniture. Empty when the
    figure reads clean."""
    renderer = renderer or render(fig)
    data = data_boxes(fig)
    named = furniture(fig, renderer)
    furniture_boxes = _boxes(box for _, box in named)
    found = labels(fig, renderer)
    label_boxes = _boxes(box for _, _, box in found)
    clashes = [f"{named[i][0]} covers {named[j][0]}" for i in range(len(named))
               for j in np.flatnonzero(_hits(furniture_boxes[i], furniture_boxes)) if j > i]
    for i, (name, _, box) in enumerate(found):
        box = label_boxes[i]
        n_data = int(_hits(box, data).sum())
        if n_data:
            clashes.append(f"{name} covers {n_data} data point(s)")
        clashes += [f"{name} covers {named[j][0]}" for j in np.flatnonzero(_hits(box, furniture_boxes))]
        clashes += [f"{name} covers {found[j][0]}" for j in np.flatnonzero(_hits(box, label_boxes)) if j > i]
    return clashes


MIN_LOG_LABELS = 2  # a log axis is read from the ratio of two labelled ticks
LABEL_PITCH = 2.5  # a tick label's room along its axis, in font sizes (the label and a gap)


def sparse_log_axes(fig, renderer=None) -> list[str]:
    """Every log axis of `fig` that draws tick labels (not one whose labels are off, as a shared
    axis's inner panels) but fewer than MIN_LOG_LABELS in view, where its length holds that many:
    one label does not say how far a factor of ten is. Empty when every log axis reads."""
    renderer = renderer or render(fig)
    found = []
    for index, ax in enumerate(fig.axes):
        if not ax.get_visible():
            continue
        for name, axis in (("x", ax.xaxis), ("y", ax.yaxis)):
            if axis.get_scale() != "log":
                continue
            params = axis.get_tick_params(which="major")
            if not any(params.get(key) for key in ("labelbottom", "labeltop", "labelleft", "labelright")):
                continue  # its labels are off by design
            box = ax.get_window_extent(renderer)
            length = box.width if name == "x" else box.height
            size = axis.get_major_ticks(1)[0].label1.get_size() * fig.dpi / 72  # px
            labels = [text for text, _ in tick_labels(axis, renderer)]
            if len(labels) < MIN_LOG_LABELS and length >= MIN_LOG_LABELS * LABEL_PITCH * size:
                title = ax.get_title(loc="left") or ax.get_title() or f"axes {index}"
                found.append(f"{title}: log {name} axis ({axis.get_label_text() or 'unlabelled'}) labels {labels}")
    return found


def _clear(box: np.ndarray, obstacles: np.ndarray, frame=None) -> bool:
    inside = frame is None or (frame.x0 <= box[0] and box[2] <= frame.x1 and frame.y0 <= box[1] and box[3] <= frame.y1)
    return bool(inside) and not _hits(box, obstacles).any()


def _obstacles(fig, renderer, but) -> np.ndarray:
    """Boxes of the data, furniture and every label other than `but`."""
    others = [box for _, artist, box in labels(fig, renderer) if artist is not but]
    return np.concatenate([data_boxes(fig), _boxes(box for _, box in furniture(fig, renderer)), _boxes(others)])


def _place_legend(legend, ax, fig, renderer) -> None:
    """Move `legend` to the first free place inside `ax`, else outside, right of it."""
    obstacles = _obstacles(fig, renderer, legend)
    if _clear(_boxes([legend.get_window_extent(renderer)])[0], obstacles):
        return
    for place in LEGEND_PLACES:
        legend.set_loc(place)
        if _clear(_boxes([legend.get_window_extent(renderer)])[0], obstacles):
            return
    legend.set_loc("upper left")
    legend.set_bbox_to_anchor((1.02, 1.0), transform=ax.transAxes)


def _place_label(text, ax, fig, renderer) -> bool:
    """Move a point label (an annotation offset in points) to the first free offset around its
    point, inside its axes; left where it is when none is free (returns False)."""
    obstacles = _obstacles(fig, renderer, text)
    frame = ax.get_window_extent(renderer)
    if _clear(_boxes([text.get_window_extent(renderer)])[0], obstacles, frame):
        return True
    original = (text.xyann, text.get_ha(), text.get_va())
    for ring in LABEL_RINGS:
        for dx, dy, ha, va in LABEL_OFFSETS:
            text.xyann = (dx * ring, dy * ring)
            text.set_ha(ha)
            text.set_va(va)
            if _clear(_boxes([text.get_window_extent(renderer)])[0], obstacles, frame):
                return True
    text.xyann, ha, va = original
    text.set_ha(ha)
    text.set_va(va)
    return False


def keep_clear(fig, optional=()) -> None:
    """Move every legend and point label of `fig` that covers data, furniture or another label
    (see the module's docstring), in drawing order, and lay the figure out again (a label
    moved into its axes can give them room), up to MAX_PASSES times; a text of `optional`
    (labels the figure can do without, as Fig. 8's ranks) that finds no free place is removed.
    A figure with nothing to move is left alone (no layout pass); one found clear keeps the
    layout it was checked in when saved (savefig would repeat it for each format). What still
    collides: collisions(fig)."""
    if not movable(fig):
        return  # a figure legend stands outside its panels, a note under them
    optional = list(optional)
    for _ in range(MAX_PASSES):
        renderer = render(fig)
        if not collisions(fig, renderer):
            fig.set_layout_engine("none")
            return
        for ax in fig.axes:
            if not ax.get_visible():
                continue
            for text in list(ax.texts):
                if _is_point_label(text):
                    if not _place_label(text, ax, fig, renderer) and any(text is o for o in optional):
                        text.remove()
            if ax.get_legend() is not None:
                _place_legend(ax.get_legend(), ax, fig, renderer)
