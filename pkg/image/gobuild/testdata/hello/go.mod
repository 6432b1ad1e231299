module example.com/hello

go 1.22

require example.com/dep v1.2.3

replace example.com/dep => ./dep
