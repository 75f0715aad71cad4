2
versicolor2
versicolor2
versicolor2	virginica2
versicolorBlabel