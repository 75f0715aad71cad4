2setosa2setosa2
versicolor2
versicolor2
versicolorBlabel