module multikueue.local/bench/ceiling

go 1.26
