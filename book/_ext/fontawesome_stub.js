/* attnbook: replaces pydata-sphinx-theme's 1.49 MB Font Awesome script (SVG-with-JS, every
   icon of the library). The theme's stylesheet already draws every `fa-*` icon it uses with
   the Font Awesome web fonts it ships, so the site keeps its icons without this script.
   Copied over the theme's file by book/_ext/attnbook_site.py when the build finishes.
   tests/test_site.py checks the icons still draw and the file stays small. */
