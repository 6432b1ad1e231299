module github.com/terrarium-os/terrarium/components/pause

go 1.26.0
