package configdrive

import "errors"

// ErrNoMetaData means a config-2 volume has no
// openstack/latest/meta_data.json, which every OpenStack config drive
// has.
var ErrNoMetaData = errors.New("no " + MetaDataFile + " on the config drive")
