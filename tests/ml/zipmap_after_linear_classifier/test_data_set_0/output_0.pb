2	virginica2
versicolor2setosa2setosa2	virginicaBlabel