BYJ<ð…sA<›'AZB
AûÁ“|ÀN@uAëQPÀîÉEÁkš—ÀmV‰ÁfÕG@’:…@€•AÁiÞyÀL$À