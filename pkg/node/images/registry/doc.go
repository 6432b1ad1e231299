// Package registry serves the container images baked into a Terrarium node
// image over the pull side of the OCI Distribution API, so containerd (through
// certs.d mirrors) and other nodes can pull them without any network access.
//
// Content comes from Stores: a read-only OCI image layout (OpenLayout), and a
// writable on-disk Cache (OpenCache) that holds side-loaded bundles and
// content pulled through from peer nodes. Every manifest and blob is hashed
// and compared with its digest before this process serves it whole for the
// first time; content that does not match is never served whole. A blob of
// some MiB asked for whole is hashed as it is sent, its last byte held
// back until the hash is known (a mismatch cuts the connection before
// it), so that a blob of hundreds of MiB is read once, not twice, and its
// client gets the headers at once. A store whose every reader checks what
// it reads (the upgrade share: WithReaderCheckedStores) is served as it is
// on disk, unhashed. A side-loaded layout
// (Cache.Sideload) is untrusted: it is read through an os.Root with size
// caps, it can never shadow a tag of the slot's bundle (WithBundle), it
// moves a tag the cache has only when signed to say so (SignedBy), and it
// is measured against the free space first (WithSpace).
//
// The referrers API (GET /v2/<name>/referrers/<digest>) lists the manifests
// of a repository whose subject is the digest (signatures, SBOMs,
// attestations), read from every store that is a ManifestLister. A layout
// records such an artifact in its index.json by digest under its subject's
// repository (layout.BundleRepositoryAnnotation), as imagebuild writes it.
package registry
