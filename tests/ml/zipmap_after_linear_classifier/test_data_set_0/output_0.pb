2	virginica2
versicolor2	virginica2	virginica2	virginicaBlabel