// Package nodestate owns firstboot's files on TERRA-STATE: the directory
// layout.StateTerrarium (/state/terrarium on a running node). It is the
// only package that builds their paths (Files, from a host or from a
// mounted STATE), and every write goes through one atomic-write helper
// (pkg/contract/atomicfile) and returns its error. Other packages use the
// typed accessors below; pkg/repo's test keeps them from naming the
// layout constants.
//
// The files, with their accessors and who uses them:
//
//	journal.json          the node state: enrollment, what was applied, the Kubernetes
//	                      steps done, upgrades, each boot's steps (Journal, schema below).
//	                      Writer: the Store (OpenJournal), held by firstboot's runner,
//	                      which hands it to kubeadmflow; the ISO installer's seed opens
//	                      one on the new disk's STATE; a command beside the service
//	                      (firstboot run --phase, backup) holds its own, and the two take
//	                      turns under flock(2) on the directory. Read-only (ReadJournal,
//	                      JournalBytes): `firstboot upgrade status`, `firstboot reset`'s
//	                      summary, the support bundle.
//	machine.yaml          the node's desired state, 0600 (ReadConfig, StoreConfig):
//	                      stored by firstboot when it enrolls or commits a signed change,
//	                      and by the installer's seed; read by firstboot and the support
//	                      bundle. Nothing is stored beside it: the journal holds its
//	                      digest, source and signer.
//	created               STATE's marker, written once (Marker, CreateMarker, ReadMarker):
//	                      by the initramfs (pkg/node/boot/bootinit) when it formats STATE,
//	                      by the installer's seed; read by firstboot for its status.
//	reset-requested       `firstboot reset`'s request (RequestReset), which the initramfs
//	                      reads (ResetRequested) before it formats STATE.
//	upgrade-request.json  `firstboot upgrade`'s request (PutUpgradeRequest), which the
//	                      runner takes (TakeUpgradeRequest) and answers in
//	upgrade-result.json   (AnswerUpgradeRequest), which the command takes
//	                      (TakeUpgradeResult; RemoveUpgradeResult clears an old one).
//	.health               the health check's probe that STATE takes a write
//	                      (ProbeWritable): written and removed at once.
//
// One file in the directory is not firstboot's: images-unpacking, the
// image unpack window of pkg/node/images/unpackwindow, which builds its path
// itself from layout.StateUnpackWindow in one place. The rest of STATE
// (var/, etc/, and through /var etcd's data, the registry's cache with its
// tag-generations.json, the etcd snapshots) belongs to the packages that
// write it, which build their paths from pkg/contract/layout.
//
// # The journal's schema and a rollback
//
// The journal names its format: "schema": Schema. Reading it (OpenJournal,
// ReadJournal) runs one migration function, migrate, which brings an
// older journal to Schema in memory; the Store's next save writes it back.
// A journal without the field is schema 1, the format from before it (it
// differs only by the field).
//
// A journal of a newer schema than this build knows was written by a newer
// slot: the node runs an older one (an upgrade rolled back, or the older
// slot was booted by hand). OpenJournal refuses it with ErrNewerSchema,
// naming the file, both versions and the way out, and nothing rewrites it:
// rewriting would drop what this build does not know and hand the newer
// slot a journal it may misread. Read-only readers (ReadJournal) read it
// forward-compatibly: the fields this build knows, the others ignored, so
// `firstboot upgrade status`, the support bundle and `firstboot reset`'s
// summary still work on such a node.
//
// Because an older build refuses to write a newer journal, and a rollback
// must land on a slot that runs, the schema is raised only for a change an
// older build would misread, and in two releases: the first learns to read
// and write the new schema but keeps writing the old one, the second
// writes the new one; an upgrade then always rolls back to a build that
// knows the journal. Adding an optional field is not such a change: an
// older build ignores it (and drops it when it writes). Going from schema 1
// to 2 is safe both ways: builds from before the field ignore it.
package nodestate
