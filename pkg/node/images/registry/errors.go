package registry

import (
	"errors"
	"fmt"
)

// ErrNotFound is matched (errors.Is) by every "no such content" error.
var ErrNotFound = errors.New("not found")

// ErrUnknownRepository is matched by errors for a repository the store does
// not hold at all; it also matches ErrNotFound.
var ErrUnknownRepository = fmt.Errorf("repository %w", ErrNotFound)

// ErrDigestMismatch is matched by errors for content whose hash is not its
// digest.
var ErrDigestMismatch = errors.New("content does not match its digest")

// ErrPeerBlobTooLarge is matched by errors for a blob a peer sends whose
// size no manifest in the cache gives, when it is larger than the
// server's limit for such a blob (WithPeerBlobLimit).
var ErrPeerBlobTooLarge = errors.New("a blob whose size is not known is capped (WithPeerBlobLimit): " +
	"pull the image's manifest through this node, so that the blob's size is known")

// Errors refusing a side-loaded layout (Cache.AddLayout). Each refuses the
// whole layout: nothing is added to the cache.
var (
	// ErrSideloadTooLarge: index.json, oci-layout, a manifest or an image
	// config is larger than its cap (sideloadIndexMax, sideloadManifestMax,
	// sideloadConfigMax), or a blob is larger than its descriptor says.
	ErrSideloadTooLarge = errors.New("larger than a side-load disk may hold " +
		"(index.json, manifests and configs 4 MiB each, a blob exactly its descriptor's size); " +
		"write the disk again with 'imagebuild bundle disk'")
	// ErrSideloadOutside: a symlink or path leads out of the layout's
	// directory (os.Root refused it).
	ErrSideloadOutside = errors.New("leads outside the side-loaded layout (a symlink out of the medium); " +
		"write the disk again with 'imagebuild bundle disk', which writes no symlinks")
	// ErrSideloadNotRegular: a file of the layout is a device, a FIFO, a
	// socket or a directory, or a symlink to one.
	ErrSideloadNotRegular = errors.New("is not a regular file (a device, FIFO, socket or directory); " +
		"write the disk again with 'imagebuild bundle disk'")
	// ErrShadowsBundle: the layout tags a name:tag that the slot's bundle
	// holds with another digest. The slot's images are never replaced.
	ErrShadowsBundle = errors.New("tags an image of the slot's bundle with another digest; " +
		"the slot's images cannot be replaced by a side-load: drop that tag from the bundle " +
		"(or give the image another tag), or update the node's image to change them")
	// ErrSideloadUnsigned: the node takes only signed bundles (it trusts a
	// key, SignedBy) and the layout's index.json has no bundle signature
	// by a key it trusts for bundles.
	ErrSideloadUnsigned = errors.New("a node that trusts any key takes only bundles signed for bundles " +
		"by a key it trusts for bundles")
	// ErrSideloadMovesTag: the layout names a name:tag the node's cache
	// already has with another digest, and is not a signed bundle that
	// says it replaces it (layout.BundleReplacesAnnotation).
	ErrSideloadMovesTag = errors.New("a side-load does not move a tag the node already has to another digest")
	// ErrSideloadReplayed: a signed bundle replaces a tag
	// (layout.BundleReplacesAnnotation) without a generation
	// (layout.BundleGenerationAnnotation) above the one the node last
	// applied to that tag: it may be an older bundle played again.
	ErrSideloadReplayed = errors.New("a signed bundle that replaces a tag needs a generation above the last one this node applied to it")
	// ErrSideloadTooDeep: an image index of the layout nests indexes
	// deeper than sideloadMaxDepth.
	ErrSideloadTooDeep = errors.New("nests image indexes deeper than a side-load disk may " +
		"(an index inside an index inside …); write the disk again with 'imagebuild bundle disk'")
)
