"""A 3DShapes-like generator: a small numpy scene at 64×64×3 with the real factor grid.

The scene is a floor, two walls meeting at a corner and a sky band, each coloured
HSV(hue, 1, 1) (the sky is a fixed pale grey-blue, since the real set has no sky-hue factor), and
one centred object: cube, cylinder, sphere or capsule, scaled by the scale factor and
Lambert-shaded. The orientation turns the camera: the wall corner slides sideways, the light
comes from a different side and the cube shows a different pair of faces.

How it is fast: the geometry depends only on (scale, shape, orientation), 480 combinations. Each
is drawn once into a template (which pixels are object, which floor/wall/sky, and their shading);
an image is its template times the three hue colours. Since rounding to uint8 is per pixel, the
coloured backgrounds (orientation × floor hue × wall hue) and objects (template × object hue) are
rounded once into uint8 tables, and an image is a masked choice between two table entries. All
arithmetic is float64 numpy with a fixed rounding, so the same classes give the same bytes.
"""

from __future__ import annotations

import functools

import numpy as np

from data_pipeline.colour import hsv_to_rgb, to_uint8
from data_pipeline.spaces import shapes3d_space

GENERATOR_VERSION = 1
IMAGE_SIZE = 64
SKY_RGB = np.array([0.82, 0.88, 0.95])
_HORIZON = 38.0  # floor begins below this row
_SKY_BOTTOM = 8.0  # sky above this row
_OBJECT_BASE = 54.0  # the object stands on this row
_OBJECT_SIZE = 16.0  # object height in pixels at scale 1
# Once a process has asked for this many images, it renders through the precomputed uint8 tables
# (building them costs about as much CPU as composing 4,000 images one at a time).
TABLES_FROM = 4096
_rendered_directly = [0]  # images this process composed without the tables


def _pixel_grid():
    centres = np.arange(IMAGE_SIZE) + 0.5
    return np.meshgrid(centres, centres)  # x (columns), y (rows)


def _light(orientation_deg: float) -> np.ndarray:
    """Unit light direction in camera coordinates (x right, y down, z towards the viewer)."""
    phi = np.deg2rad(orientation_deg) - 0.6
    vec = np.array([np.sin(phi), -0.5, np.cos(phi)])
    return vec / np.linalg.norm(vec)


def _lambert(nx, ny, nz, light) -> np.ndarray:
    return 0.3 + 0.7 * np.clip(nx * light[0] + ny * light[1] + nz * light[2], 0.0, 1.0)


@functools.cache
def _background(orientation_class: int):
    """(layer, shade) for the scene without object: layer 0 floor, 1 wall, 2 sky."""
    x, y = _pixel_grid()
    orientation = shapes3d_space().values[5][orientation_class]
    corner = 32.0 - 0.6 * orientation
    layer = np.full((IMAGE_SIZE, IMAGE_SIZE), 1, dtype=np.int8)
    layer[y >= _HORIZON] = 0
    layer[y < _SKY_BOTTOM] = 2
    shade = np.ones((IMAGE_SIZE, IMAGE_SIZE))
    shade[(layer == 1) & (x < corner)] = 0.72
    shade[(layer == 1) & (x >= corner)] = 0.92
    floor = layer == 0
    shade[floor] = 0.65 + 0.35 * (y[floor] - _HORIZON) / (IMAGE_SIZE - _HORIZON)
    return layer, shade


@functools.cache
def _object(scale_class: int, shape_class: int, orientation_class: int):
    """(mask, shade) of the object for one (scale, shape, orientation)."""
    space = shapes3d_space()
    scale, orientation = space.values[3][scale_class], space.values[5][orientation_class]
    light = _light(orientation)
    x, y = _pixel_grid()
    size = _OBJECT_SIZE * scale
    cx = 32.0
    shade = np.zeros_like(x)
    if shape_class == 0:  # cube: two side faces whose widths follow the camera angle, and a top
        theta = np.deg2rad(orientation + 45.0)
        left_w, right_w = size * abs(np.cos(theta)), size * abs(np.sin(theta))
        left, right = cx - (left_w + right_w) / 2, cx + (left_w + right_w) / 2
        top, cap = _OBJECT_BASE - size, 0.3 * size
        body = (x >= left) & (x < right) & (y >= top) & (y < _OBJECT_BASE)
        lid = (x >= left) & (x < right) & (y >= top - cap) & (y < top)
        mask = body | lid
        split = left + left_w
        shade[body & (x < split)] = _lambert(-np.sin(theta), 0, np.cos(theta), light)
        shade[body & (x >= split)] = _lambert(np.cos(theta), 0, np.sin(theta), light)
        shade[lid] = _lambert(0, -1, 0.3, light)
    elif shape_class == 1:  # cylinder: vertical, with an elliptic top
        radius = size / 2
        cap = 0.25 * size
        top = _OBJECT_BASE - size
        nx = (x - cx) / radius
        body = (np.abs(nx) < 1) & (y >= top) & (y < _OBJECT_BASE)
        lid = ((x - cx) / radius) ** 2 + ((y - top) / cap) ** 2 < 1
        mask = body | lid
        nz = np.sqrt(np.clip(1 - nx ** 2, 0, 1))
        shade[body] = _lambert(nx, 0, nz, light)[body]
        shade[lid & ~body | (lid & (y < top))] = _lambert(0, -1, 0.3, light)
    elif shape_class == 2:  # sphere resting on the floor
        radius = size / 2
        cy = _OBJECT_BASE - radius
        nx, ny = (x - cx) / radius, (y - cy) / radius
        mask = nx ** 2 + ny ** 2 < 1
        nz = np.sqrt(np.clip(1 - nx ** 2 - ny ** 2, 0, 1))
        shade[mask] = _lambert(nx, ny, nz, light)[mask]
    else:  # capsule: a vertical segment swept by a disc
        radius = 0.3 * size
        low, high = _OBJECT_BASE - radius, _OBJECT_BASE - 1.2 * size + radius
        nearest_y = np.clip(y, high, low)
        nx, ny = (x - cx) / radius, (y - nearest_y) / radius
        mask = nx ** 2 + ny ** 2 < 1
        nz = np.sqrt(np.clip(1 - nx ** 2 - ny ** 2, 0, 1))
        shade[mask] = _lambert(nx, ny, nz, light)[mask]
    return mask, shade


@functools.cache
def _tables():
    """Every part of every image, already in uint8: the background (15, 10, 10, 64, 64, 3) by
    orientation, floor hue and wall hue; the object mask (8, 4, 15, 64, 64) and the object
    (8, 4, 15, 10, 64, 64, 3) by scale, shape, orientation and object hue. 77 MB, built once."""
    space = shapes3d_space()
    hue_rgb = hsv_to_rgb(space.values[0])
    n_hues, n_scales, n_shapes, n_orients = space.sizes[0], space.sizes[3], space.sizes[4], space.sizes[5]
    back = np.empty((n_orients, n_hues, n_hues, IMAGE_SIZE, IMAGE_SIZE, 3), dtype=np.uint8)
    for o in range(n_orients):
        layer, shade = _background(o)
        for fh in range(n_hues):
            for wh in range(n_hues):
                colours = np.stack([hue_rgb[fh], hue_rgb[wh], SKY_RGB])
                back[o, fh, wh] = to_uint8(colours[layer] * shade[..., None])
    masks = np.empty((n_scales, n_shapes, n_orients, IMAGE_SIZE, IMAGE_SIZE), dtype=bool)
    objects = np.empty((n_scales, n_shapes, n_orients, n_hues, IMAGE_SIZE, IMAGE_SIZE, 3), dtype=np.uint8)
    for s in range(n_scales):
        for k in range(n_shapes):
            for o in range(n_orients):
                mask, shade = _object(s, k, o)
                masks[s, k, o] = mask
                objects[s, k, o] = to_uint8(shade[None, ..., None] * hue_rgb[:, None, None, :])
    return back, masks, objects


def _render_directly(classes: np.ndarray) -> np.ndarray:
    """The same images composed one at a time in float64, without the tables (for few images)."""
    hue_rgb = hsv_to_rgb(shapes3d_space().values[0])
    out = np.empty((len(classes), IMAGE_SIZE, IMAGE_SIZE, 3), dtype=np.uint8)
    for row, (fh, wh, oh, scale, shape, orient) in enumerate(classes):
        layer, back_shade = _background(int(orient))
        mask, obj_shade = _object(int(scale), int(shape), int(orient))
        image = np.stack([hue_rgb[fh], hue_rgb[wh], SKY_RGB])[layer] * back_shade[..., None]
        image[mask] = obj_shade[mask][:, None] * hue_rgb[oh]
        out[row] = to_uint8(image)
    return out


def render(classes: np.ndarray, *, chunk: int = 1024) -> np.ndarray:
    """Images (N, 64, 64, 3) uint8 of an (N, 6) class array, as ``3dshapes.h5`` stores them.

    Each pixel is ``to_uint8`` of the background colour × shade, or of the object's shade × hue
    where the object is. Once the process has asked for :data:`TABLES_FROM` images, both parts
    come precomputed in uint8 (:func:`_tables`, about 1 s of CPU to build); rounding is per pixel,
    so composing after rounding gives the same bytes as :func:`_render_directly`, which rounds the
    composed float image and serves the first few thousand images.
    """
    space = shapes3d_space()
    classes = space.check_classes(classes)
    if not _tables.cache_info().currsize and _rendered_directly[0] + len(classes) < TABLES_FROM:
        _rendered_directly[0] += len(classes)
        return _render_directly(classes)
    back, masks, objects = _tables()
    n_back, n_masks = back.shape[:3], masks.shape[:3]
    back, masks = back.reshape(-1, *back.shape[3:]), masks.reshape(-1, *masks.shape[3:])
    n_objects, objects = objects.shape[:4], objects.reshape(-1, *objects.shape[4:])
    out = np.empty((len(classes), IMAGE_SIZE, IMAGE_SIZE, 3), dtype=np.uint8)
    for start in range(0, len(classes), chunk):
        fh, wh, oh, scale, shape, orient = classes[start:start + chunk].T
        part = out[start:start + len(fh)]
        np.take(back, np.ravel_multi_index((orient, fh, wh), n_back), axis=0, out=part)
        template = np.ravel_multi_index((scale, shape, orient), n_masks)
        np.copyto(part, np.take(objects, np.ravel_multi_index((scale, shape, orient, oh), n_objects), axis=0),
                  where=np.take(masks, template, axis=0)[..., None])
    return out
