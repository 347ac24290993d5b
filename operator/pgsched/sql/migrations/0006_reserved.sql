-- Reserved: migration number 6 belongs to another branch of this release (see the
-- release's migration plan). This placeholder keeps versions 1..N without gaps until that
-- branch's 0006 replaces it on merge; it changes nothing.
SELECT 1;
