package nocloud

import "errors"

// ErrNoData means a NoCloud volume holds neither user-data nor meta-data.
var ErrNoData = errors.New("no " + UserDataFile + " and no " + MetaDataFile + " on the NoCloud volume")
